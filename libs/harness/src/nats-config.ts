const SIZE = /^\d+(\.\d+)?\s*(B|K|KB|M|MB|G|GB)?$/i;

export interface NatsConfigOptions {
  host: string;
  /** `-1` lets nats-server pick a free port. */
  port: number;
  storeDir: string;
  /** nats-server size syntax, e.g. `8MB`. */
  maxPayload: string;
  /** Further top-level blocks (authorization, tls), appended as they are. */
  blocks?: string[];
}

/**
 * A nats-server configuration file: one client listener and JetStream on `storeDir`, plus
 * the given authorization and TLS blocks.
 */
export function renderNatsConfig(options: NatsConfigOptions): string {
  if (!SIZE.test(options.maxPayload)) {
    throw new Error(
      `maxPayload must be a size such as "8MB", got ${JSON.stringify(options.maxPayload)}`,
    );
  }
  return [
    `host: ${JSON.stringify(options.host)}`,
    `port: ${options.port}`,
    `max_payload: ${options.maxPayload.replace(/\s+/g, "")}`,
    "jetstream {",
    `  store_dir: ${JSON.stringify(options.storeDir)}`,
    "}",
    ...(options.blocks ?? []),
    "",
  ].join("\n");
}
