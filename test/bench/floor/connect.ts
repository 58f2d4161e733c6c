import { readFileSync } from "node:fs";
import { connect, nkeyAuthenticator } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/transport-node";

/**
 * Connects as a service does (`NATS_URL`, an nkey seed file, the bus CA: TLS), with nothing
 * of ZML's connection wrapper on top.
 */
export function connectFloor(
  env: NodeJS.ProcessEnv,
  name: string,
  inboxPrefix?: string,
): Promise<NatsConnection> {
  const seed = readFileSync(env.NATS_NKEY_SEED_FILE!, "utf8").trim();
  return connect({
    servers: env.NATS_URL!,
    name,
    tls: { caFile: env.NATS_CA_FILE! },
    authenticator: nkeyAuthenticator(new TextEncoder().encode(seed)),
    ...(inboxPrefix ? { inboxPrefix } : {}),
  });
}
