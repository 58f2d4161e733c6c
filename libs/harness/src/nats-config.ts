const SIZE = /^\d+(\.\d+)?\s*(B|K|KB|M|MB|G|GB)?$/i;

/** The route listener of one member of a cluster, and where its peers listen. */
export interface NatsClusterConfig {
  /** Cluster name; every member carries the same one. */
  name: string;
  port: number;
  /** The other members' route URLs, e.g. `nats-route://user:pass@127.0.0.1:6222`. */
  routes: string[];
  /** Credentials a peer must present on its route connection. */
  user: string;
  password: string;
}

export interface NatsConfigOptions {
  host: string;
  /** `-1` lets nats-server pick a free port. */
  port: number;
  storeDir: string;
  /** nats-server size syntax, e.g. `8MB`. */
  maxPayload: string;
  /** Further top-level blocks (authorization, tls), appended as they are. */
  blocks?: string[];
  /** Unique per cluster member; JetStream needs it to place replicas. */
  serverName?: string;
  /** Makes the server a member of a cluster. */
  cluster?: NatsClusterConfig;
  /** Monitoring port (`/healthz`, `/jsz`), on `host`. */
  httpPort?: number;
}

/**
 * A nats-server configuration file: one client listener and JetStream on `storeDir`, plus
 * the given authorization and TLS blocks, and optionally a cluster route listener.
 */
export function renderNatsConfig(options: NatsConfigOptions): string {
  if (!SIZE.test(options.maxPayload)) {
    throw new Error(
      `maxPayload must be a size such as "8MB", got ${JSON.stringify(options.maxPayload)}`,
    );
  }
  const { cluster } = options;
  return [
    ...(options.serverName === undefined
      ? []
      : [`server_name: ${JSON.stringify(options.serverName)}`]),
    `host: ${JSON.stringify(options.host)}`,
    `port: ${options.port}`,
    ...(options.httpPort === undefined
      ? []
      : [`http: ${JSON.stringify(`${options.host}:${options.httpPort}`)}`]),
    `max_payload: ${options.maxPayload.replace(/\s+/g, "")}`,
    "jetstream {",
    `  store_dir: ${JSON.stringify(options.storeDir)}`,
    "}",
    ...(cluster === undefined
      ? []
      : [
          "cluster {",
          `  name: ${JSON.stringify(cluster.name)}`,
          `  listen: ${JSON.stringify(`${options.host}:${cluster.port}`)}`,
          "  authorization {",
          `    user: ${JSON.stringify(cluster.user)}`,
          `    password: ${JSON.stringify(cluster.password)}`,
          "  }",
          "  routes: [",
          ...cluster.routes.map((r) => `    ${JSON.stringify(r)}`),
          "  ]",
          "}",
        ]),
    ...(options.blocks ?? []),
    "",
  ].join("\n");
}
