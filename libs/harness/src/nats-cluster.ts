import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  clientOptionsFor,
  createBusSecurity,
  HARNESS_IDENTITY,
  serviceEnvFor,
} from "./bus-security.ts";
import type { NatsClientOptions } from "./bus-security.ts";
import { findFreePort } from "./free-port.ts";
import { renderNatsConfig } from "./nats-config.ts";
import { findNatsServerBinary, NatsServerUnavailableError } from "./nats-server.ts";
import { pollUntil } from "./poll.ts";
import { startProcess } from "./process.ts";
import type { ManagedProcess } from "./process.ts";

export interface StartNatsClusterOptions {
  /** Number of servers; default 3 (the smallest cluster that keeps R3 state through one loss). */
  size?: number;
  /** Maximum message payload; default `"8MB"`. */
  maxPayload?: string;
  /** Receives every line any server logs, with the server's name. */
  log?: (server: string, line: string) => void;
  /** Where `PATH` is read to find `nats-server`; default `process.env`. */
  env?: Record<string, string | undefined>;
  /** Accounts that get a `batch-<account>` producer identity; default `["e2e"]`. */
  batchAccounts?: string[];
  /** Give up waiting for JetStream to be healthy on every server after this long; default 30 s. */
  readyTimeoutMs?: number;
}

/** One server of a {@link NatsClusterHandle}; its ports and store survive kill and start. */
export interface NatsClusterMember {
  /** `server_name`, e.g. `n1`. */
  readonly name: string;
  /** This server alone, e.g. `nats://127.0.0.1:40001`. */
  readonly url: string;
  readonly port: number;
  readonly storeDir: string;
  /** Its monitoring endpoint, e.g. `http://127.0.0.1:40003` (`/healthz`, `/jsz`, `/routez`). */
  readonly monitorUrl: string;
  isRunning(): boolean;
  /** SIGKILL: no goodbye to clients or peers, as a crashed machine. */
  kill(): Promise<void>;
  /** SIGTERM (lame-duck free), then SIGKILL after a grace period. */
  stop(): Promise<void>;
  /** Starts it again on the same ports and store; resolves once JetStream there is healthy. */
  start(): Promise<void>;
  /** `stop()` then `start()`. */
  restart(): Promise<void>;
  /** Resolves once the server's `/healthz` says JetStream there is current. */
  waitHealthy(timeoutMs?: number): Promise<void>;
}

export interface NatsClusterHandle {
  /** Every member's client URL, comma-separated: what a service's `NATS_URL` gets. */
  readonly url: string;
  readonly servers: readonly NatsClusterMember[];
  readonly secure: true;
  /** Connection options for one identity (default: the harness's own), for `connectBus`. */
  client(identity?: string): NatsClientOptions;
  /** `NATS_URL` (all members), `NATS_NKEY_SEED_FILE`, `NATS_CA_FILE` for `identity`. */
  serviceEnv(identity: string): Record<string, string>;
  /** Resolves once every running member reports JetStream healthy. */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /** Stops every member and removes what the cluster created. */
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

const HOST = "127.0.0.1";
const STOP_GRACE_MS = 5_000;
const START_TIMEOUT_MS = 15_000;

async function distinctFreePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await findFreePort(HOST));
  return [...ports];
}

async function jetStreamHealthy(httpPort: number): Promise<boolean> {
  try {
    const res = await fetch(`http://${HOST}:${httpPort}/healthz`, {
      signal: AbortSignal.timeout(2000),
    });
    await res.body?.cancel();
    return res.status === 200;
  } catch {
    return false;
  }
}

/** Whether the server at `httpPort` has a route to each of its `peers` other members. */
async function routedToAll(httpPort: number, peers: number): Promise<boolean> {
  try {
    const res = await fetch(`http://${HOST}:${httpPort}/routez`, {
      signal: AbortSignal.timeout(2000),
    });
    const routez = (await res.json()) as { num_routes?: number };
    return routez.num_routes === peers;
  } catch {
    return false;
  }
}

/**
 * Starts a cluster of `nats-server` children with clustered JetStream on loopback, secured as
 * {@link startNatsServer} secures one server: an nkey identity per service with its
 * least-privilege permissions and client TLS from a local CA (the same identities on every
 * member). Routes between members require a generated user and password. Each member has its
 * own client, route and monitoring port and store dir, all kept across `kill()`/`start()`, so
 * a test can take one server away and bring it back.
 *
 * Resolves once every member reports JetStream healthy (a meta leader elected and the
 * server current with it) and routes to every other member: a meta leader needs only a
 * quorum, and a route still forming would make a test's "one server down" two. Needs `nats-server` installed: a cluster is never a container or
 * `NATS_URL`.
 */
export async function startNatsCluster(
  options: StartNatsClusterOptions = {},
): Promise<NatsClusterHandle> {
  const size = options.size ?? 3;
  if (!Number.isInteger(size) || size < 1) {
    throw new Error(`size must be a positive integer, got ${String(size)}`);
  }
  const binary = findNatsServerBinary(options.env ?? process.env);
  if (binary === undefined) {
    throw new NatsServerUnavailableError(
      "a NATS cluster needs nats-server installed (looked on PATH, /usr/sbin and /usr/local/bin); " +
        "install it with `apt-get install -y nats-server`",
    );
  }
  const readyTimeoutMs = options.readyTimeoutMs ?? 30_000;
  const workDir = await mkdtemp(join(tmpdir(), "zml-nats-cluster-"));
  const members: NatsClusterMember[] = [];
  const running = new Map<string, ManagedProcess>();
  let security: Awaited<ReturnType<typeof createBusSecurity>>;
  let url: string;

  try {
    security = await createBusSecurity(join(workDir, "auth"), options.batchAccounts ?? ["e2e"]);
    const ports = await distinctFreePorts(size * 3);
    const routeUser = "route";
    const routePassword = randomBytes(18).toString("base64url");
    const layout = Array.from({ length: size }, (_, i) => ({
      name: `n${i + 1}`,
      port: ports[i * 3]!,
      clusterPort: ports[i * 3 + 1]!,
      httpPort: ports[i * 3 + 2]!,
      storeDir: join(workDir, `n${i + 1}`, "store"),
      configPath: join(workDir, `n${i + 1}`, "nats.conf"),
    }));
    url = layout.map((m) => `nats://${HOST}:${m.port}`).join(",");

    for (const m of layout) {
      await mkdir(m.storeDir, { recursive: true });
      const routes = layout
        .filter((peer) => peer !== m)
        .map((peer) => `nats-route://${routeUser}:${routePassword}@${HOST}:${peer.clusterPort}`);
      await writeFile(
        m.configPath,
        renderNatsConfig({
          host: HOST,
          port: m.port,
          storeDir: m.storeDir,
          maxPayload: options.maxPayload ?? "8MB",
          blocks: security.blocks,
          serverName: m.name,
          httpPort: m.httpPort,
          cluster: {
            name: "zml",
            port: m.clusterPort,
            routes,
            user: routeUser,
            password: routePassword,
          },
        }),
      );

      const waitHealthy = async (timeoutMs = readyTimeoutMs) => {
        await pollUntil(() => jetStreamHealthy(m.httpPort), {
          timeoutMs,
          intervalMs: 100,
          message: `JetStream on nats-server ${m.name} (${HOST}:${m.port}) to report healthy`,
        });
      };
      const launch = async () => {
        if (running.has(m.name)) return;
        const { log } = options;
        const proc = await startProcess({
          name: `nats-server ${m.name}`,
          command: binary,
          args: ["-c", m.configPath],
          readyLine: /Server is ready/,
          readyTimeoutMs: START_TIMEOUT_MS,
          ...(log ? { onOutput: (line: string) => log(m.name, line) } : {}),
        });
        running.set(m.name, proc);
        void proc.exited.then(() => {
          if (running.get(m.name) === proc) running.delete(m.name);
        });
      };
      const halt = async (how: "kill" | "stop") => {
        const proc = running.get(m.name);
        if (!proc) return;
        if (how === "kill") await proc.kill();
        else await proc.stop("SIGTERM", STOP_GRACE_MS);
        running.delete(m.name);
      };
      const start = async () => {
        await launch();
        await waitHealthy();
      };
      members.push({
        name: m.name,
        url: `nats://${HOST}:${m.port}`,
        port: m.port,
        storeDir: m.storeDir,
        monitorUrl: `http://${HOST}:${m.httpPort}`,
        isRunning: () => running.has(m.name),
        kill: () => halt("kill"),
        stop: () => halt("stop"),
        start,
        async restart() {
          await halt("stop");
          await start();
        },
        waitHealthy,
      });
    }
    // Started together: a member waits for its peers before JetStream elects a meta leader.
    await Promise.all(members.map((m) => m.start()));
    await Promise.all(
      members.map((m) =>
        pollUntil(() => routedToAll(Number(new URL(m.monitorUrl).port), size - 1), {
          timeoutMs: readyTimeoutMs,
          intervalMs: 100,
          message: `nats-server ${m.name} to route to its ${size - 1} peers`,
        }),
      ),
    );
  } catch (error) {
    await Promise.all([...running.values()].map((p) => p.kill()));
    await rm(workDir, { recursive: true, force: true });
    throw error;
  }

  let stopped: Promise<void> | undefined;
  const stop = () => {
    stopped ??= (async () => {
      await Promise.all(members.map((m) => m.stop()));
      await rm(workDir, { recursive: true, force: true });
    })();
    return stopped;
  };
  const clusterUrl = url;
  const clusterSecurity = security;
  return {
    url: clusterUrl,
    servers: members,
    secure: true,
    client: (identity = HARNESS_IDENTITY) =>
      clientOptionsFor(clusterUrl, clusterSecurity, identity),
    serviceEnv: (identity) =>
      serviceEnvFor(clientOptionsFor(clusterUrl, clusterSecurity, identity)),
    async waitHealthy(timeoutMs) {
      await Promise.all(members.filter((m) => m.isRunning()).map((m) => m.waitHealthy(timeoutMs)));
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}
