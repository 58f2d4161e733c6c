export { findFreePort } from "./free-port.ts";
export { pollUntil, PollTimeoutError } from "./poll.ts";
export type { PollOptions } from "./poll.ts";
export {
  startNatsServer,
  findNatsServerBinary,
  NatsServerUnavailableError,
  NATS_SERVER_VERSION,
} from "./nats-server.ts";
export type { NatsServerHandle, StartNatsServerOptions } from "./nats-server.ts";
export { startProcess, ProcessExitedError, ProcessTimeoutError } from "./process.ts";
export type { ManagedProcess, StartProcessOptions } from "./process.ts";
export type { OutputStream } from "./output-log.ts";
export { repoRoot } from "./repo-root.ts";
export {
  SERVICE_MALLOC_ENV,
  SERVICE_NODE_FLAGS,
  serviceCompileCacheDir,
  serviceRuntimeEnv,
  warmCompileCache,
} from "./service-flags.ts";
export { pourResponse } from "./pour-response.ts";
export { createTestCertificate } from "./tls-cert.ts";
export type { TestCertificate } from "./tls-cert.ts";
export { HARNESS_IDENTITY, UnknownHarnessIdentityError } from "./bus-security.ts";
export type { NatsClientOptions } from "./bus-security.ts";
export { startNatsCluster } from "./nats-cluster.ts";
export type {
  NatsClusterHandle,
  NatsClusterMember,
  StartNatsClusterOptions,
} from "./nats-cluster.ts";
