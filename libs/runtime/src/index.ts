export {
  parseConfig,
  ConfigError,
  formatConfigError,
  reportStartupErrors,
  readConfigFile,
  configProblem,
  CONFIG_ERROR_EXIT_CODE,
} from "./config.ts";
export type { ConfigProblem, ConfigFixes } from "./config.ts";
export { createShutdown, createWorkCounter, waitUntil, SHUTDOWN_CONFIG_SHAPE } from "./shutdown.ts";
export type {
  ShutdownLogger,
  Shutdown,
  ShutdownSettings,
  StopContext,
  WorkCounter,
} from "./shutdown.ts";
export {
  guardedConnector,
  guardedLookup,
  NodeAddressRefusedError,
  systemResolver,
} from "./node-connector.ts";
export type { HostResolver, ResolvedAddress } from "./node-connector.ts";
export { startWhenPossible } from "./start-retry.ts";
export type { StartWhenPossibleOptions, StartRetryLogger } from "./start-retry.ts";
export { bootService } from "./boot.ts";
export type {
  Boot,
  BootConfig,
  RunningService,
  ServeOptions,
  ServiceDefinition,
  ServiceParts,
} from "./boot.ts";
