import { accessSync, constants } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import type { BusPermissions } from "@zml/bus-auth";
import {
  clientOptionsFor,
  createBusSecurity,
  HARNESS_IDENTITY,
  serviceEnvFor,
} from "./bus-security.ts";
import type { BusSecurity, NatsClientOptions } from "./bus-security.ts";
import { findFreePort } from "./free-port.ts";
import { renderNatsConfig } from "./nats-config.ts";
import { pollUntil } from "./poll.ts";
import { startProcess } from "./process.ts";
import type { ManagedProcess } from "./process.ts";

export interface StartNatsServerOptions {
  /** Client port; default: a free one, kept across restarts. */
  port?: number;
  /** JetStream store directory; default: a temp dir removed on `stop()`. A given one is kept. */
  storeDir?: string;
  /** Maximum message payload; default `"8MB"`. */
  maxPayload?: string;
  /** Receives every line the server logs. */
  log?: (line: string) => void;
  /** Where `NATS_URL` and `PATH` are read; default `process.env`. */
  env?: Record<string, string | undefined>;
  /**
   * `"secure"` (default): nkey identities with least-privilege permissions and TLS, as
   * `zml bus-credentials` generates them. `"open"`: anonymous clients welcome, no TLS; only
   * for tests that prove a service refuses such a bus.
   */
  security?: "secure" | "open";
  /** Accounts that get a `batch-<account>` producer identity; default `["e2e"]`. */
  batchAccounts?: string[];
  /**
   * Identities beyond the services' (`"secure"` only), each with exactly the permissions
   * given: a test's own least-privilege client, such as the benchmark's floor.
   */
  extraIdentities?: Readonly<Record<string, BusPermissions>>;
}

export interface NatsServerHandle {
  /** e.g. `nats://127.0.0.1:4222`. */
  url: string;
  port: number;
  /** JetStream store directory (for a container: the path inside it). */
  storeDir: string;
  /** False for an `"open"` server (or an external one): no identities to hand out. */
  secure: boolean;
  /**
   * Connection options for one identity (default: the harness's own, allowed everything),
   * to spread into `connectBus`.
   */
  client(identity?: string): NatsClientOptions;
  /** `NATS_URL`, `NATS_NKEY_SEED_FILE`, `NATS_CA_FILE` for a service running as `identity`. */
  serviceEnv(identity: string): Record<string, string>;
  /** Stops the server and removes what it created; does nothing for an external server. */
  stop(): Promise<void>;
  /** Stops and starts the server again on the same port with the same store. */
  restart(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** No NATS server could be provided, or the operation needs one this harness owns. */
export class NatsServerUnavailableError extends Error {
  readonly code = "nats_unavailable";
  constructor(message: string) {
    super(message);
    this.name = "NatsServerUnavailableError";
  }
}

const HOST = "127.0.0.1";
/**
 * The NATS version every test runs: Debian bookworm's `nats-server` package (what
 * `deploy/dev/bootstrap.sh` installs, the only one this project's machines can get). Images
 * pin a newer release instead, at or above the minimum in docs/security.md.
 */
export const NATS_SERVER_VERSION = "2.9.10";
// Pinned at or above the minimum in docs/security.md (CVE-2025-30215).
const CONTAINER_IMAGE = "nats:2.11.1-alpine";
const READY_TIMEOUT_MS = 15_000;
const STOP_GRACE_MS = 5_000;
const EXTRA_BIN_DIRS = ["/usr/sbin", "/usr/local/bin"];

/** Where `nats-server` is installed, searching PATH then /usr/sbin and /usr/local/bin. */
export function findNatsServerBinary(
  env: Record<string, string | undefined> = process.env,
): string | undefined {
  const dirs = [...(env.PATH ?? "").split(delimiter).filter(Boolean), ...EXTRA_BIN_DIRS];
  for (const dir of dirs) {
    const candidate = join(dir, "nats-server");
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Resolves once a client connection gets the server's `INFO` greeting. */
function greets(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    let received = "";
    const finish = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => finish(false));
    socket.on("error", () => finish(false));
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString("latin1");
      if (received.includes("\r\n")) finish(received.startsWith("INFO "));
    });
    socket.on("close", () => finish(false));
  });
}

function waitForGreeting(host: string, port: number): Promise<boolean> {
  return pollUntil(() => greets(host, port), {
    timeoutMs: READY_TIMEOUT_MS,
    intervalMs: 50,
    message: `nats-server to greet clients on ${host}:${port}`,
  });
}

/**
 * Provides a NATS server with JetStream for tests, benchmarks and the dev stack:
 *
 * 1. `NATS_URL` set → that server; nothing is started, `stop()` does nothing and
 *    `restart()` throws {@link NatsServerUnavailableError}.
 * 2. `nats-server` installed → a child process on 127.0.0.1 with a generated config.
 *    By default it is secured as production is: nkey identities with least-privilege
 *    permissions and TLS (see {@link StartNatsServerOptions.security}).
 * 3. A Docker engine reachable → a `nats:2.11.1-alpine` container (testcontainers); open,
 *    for machines without nats-server only.
 * 4. Otherwise → {@link NatsServerUnavailableError} saying how to install nats-server.
 *
 * Resolves once the server greets a client connection.
 */
export async function startNatsServer(
  options: StartNatsServerOptions = {},
): Promise<NatsServerHandle> {
  const env = options.env ?? process.env;
  const external = env.NATS_URL?.trim();
  if (external) return externalServer(external);

  const binary = findNatsServerBinary(env);
  if (binary !== undefined) return localServer(binary, options);

  if (await dockerReachable()) return containerServer(options);

  throw new NatsServerUnavailableError(
    "no NATS server available: NATS_URL is not set, nats-server is not installed " +
      "(looked on PATH, /usr/sbin and /usr/local/bin) and no Docker engine is reachable. " +
      "Install it with `apt-get install -y nats-server`, or point NATS_URL at a running server.",
  );
}

function externalServer(url: string): NatsServerHandle {
  const first = url.split(",")[0]!.trim();
  const parsed = new URL(first.includes("://") ? first : `nats://${first}`);
  const stop = () => Promise.resolve();
  return {
    url,
    port: parsed.port === "" ? 4222 : Number(parsed.port),
    storeDir: "",
    ...identities(url, undefined),
    stop,
    restart: () =>
      Promise.reject(
        new NatsServerUnavailableError(
          `cannot restart the external NATS server at ${url} (NATS_URL); unset NATS_URL to let the harness start its own`,
        ),
      ),
    [Symbol.asyncDispose]: stop,
  };
}

async function localServer(
  binary: string,
  options: StartNatsServerOptions,
): Promise<NatsServerHandle> {
  const workDir = await mkdtemp(join(tmpdir(), "zml-nats-"));
  const storeDir = options.storeDir ?? join(workDir, "store");
  const configPath = join(workDir, "nats.conf");
  const maxPayload = options.maxPayload ?? "8MB";
  let security: BusSecurity | undefined;
  const writeConfig = (port: number) =>
    writeFile(
      configPath,
      renderNatsConfig({ host: HOST, port, storeDir, maxPayload, blocks: security?.blocks ?? [] }),
    );

  const launch = async (port: number): Promise<{ proc: ManagedProcess; port: number }> => {
    await writeConfig(port);
    const proc = await startProcess({
      name: "nats-server",
      command: binary,
      args: ["-c", configPath],
      readyLine: /Server is ready/,
      readyTimeoutMs: READY_TIMEOUT_MS,
      ...(options.log ? { onOutput: options.log } : {}),
    });
    try {
      const listening = await proc.waitForOutput(
        /Listening for client connections on \S+:(\d+)/,
        1000,
      );
      const actual = Number(listening[1]);
      await waitForGreeting(HOST, actual);
      return { proc, port: actual };
    } catch (error) {
      await proc.kill();
      throw error;
    }
  };

  let current: { proc: ManagedProcess; port: number };
  try {
    await mkdir(storeDir, { recursive: true });
    if ((options.security ?? "secure") === "secure") {
      security = await createBusSecurity(
        join(workDir, "auth"),
        options.batchAccounts ?? ["e2e"],
        options.extraIdentities,
      );
    }
    // -1: nats-server binds a free port itself, so no other process can grab it meanwhile.
    current = await launch(options.port ?? -1);
  } catch (error) {
    await rm(workDir, { recursive: true, force: true });
    throw error;
  }
  const { port } = current;

  let stopped: Promise<void> | undefined;
  const stop = () => {
    stopped ??= (async () => {
      await current.proc.stop("SIGTERM", STOP_GRACE_MS);
      await rm(workDir, { recursive: true, force: true });
    })();
    return stopped;
  };

  const url = `nats://${HOST}:${port}`;
  return {
    url,
    port,
    storeDir,
    ...identities(url, security),
    stop,
    async restart() {
      if (stopped)
        throw new NatsServerUnavailableError("cannot restart a NATS server after stop()");
      await current.proc.stop("SIGTERM", STOP_GRACE_MS);
      current = await launch(port);
    },
    [Symbol.asyncDispose]: stop,
  };
}

function identities(url: string, security: BusSecurity | undefined) {
  return {
    secure: security !== undefined,
    client: (identity = HARNESS_IDENTITY) => clientOptionsFor(url, security, identity),
    serviceEnv: (identity: string) => serviceEnvFor(clientOptionsFor(url, security, identity)),
  };
}

async function dockerReachable(): Promise<boolean> {
  try {
    const { getContainerRuntimeClient } = await import("testcontainers");
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

async function containerServer(options: StartNatsServerOptions): Promise<NatsServerHandle> {
  const { GenericContainer, Wait } = await import("testcontainers");
  const port = options.port ?? (await findFreePort());
  const storeDir = "/data";
  let container = new GenericContainer(CONTAINER_IMAGE)
    .withCopyContentToContainer([
      {
        content: renderNatsConfig({
          host: "0.0.0.0",
          port: 4222,
          storeDir,
          maxPayload: options.maxPayload ?? "8MB",
        }),
        target: "/etc/nats/zml.conf",
      },
    ])
    .withCommand(["-c", "/etc/nats/zml.conf", "-js"])
    // A fixed host port so that clients reconnect to the same address after restart().
    .withExposedPorts({ container: 4222, host: port })
    .withWaitStrategy(Wait.forLogMessage(/Server is ready/))
    .withStartupTimeout(60_000);
  if (options.storeDir !== undefined) {
    container = container.withBindMounts([{ source: options.storeDir, target: storeDir }]);
  }
  const { log } = options;
  if (log) {
    container = container.withLogConsumer((stream) => {
      stream.on("data", (chunk: Buffer | string) => {
        for (const line of chunk.toString().split(/\r?\n/)) if (line !== "") log(line);
      });
    });
  }
  const started = await container.start();
  const host = started.getHost();
  await waitForGreeting(host, port);

  let stopped: Promise<void> | undefined;
  const stop = () => {
    stopped ??= started.stop().then(() => undefined);
    return stopped;
  };
  const url = `nats://${host}:${port}`;
  return {
    url,
    port,
    storeDir: options.storeDir ?? storeDir,
    ...identities(url, undefined),
    stop,
    async restart() {
      if (stopped)
        throw new NatsServerUnavailableError("cannot restart a NATS server after stop()");
      await started.restart();
      await waitForGreeting(host, port);
    },
    [Symbol.asyncDispose]: stop,
  };
}
