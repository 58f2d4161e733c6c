import { readFileSync } from "node:fs";
import { connect } from "@nats-io/transport-node";
import { nkeyAuthenticator } from "@nats-io/nats-core";
import type { ConnectionOptions, NatsConnection, Status } from "@nats-io/nats-core";
import { turnPublisherOf } from "./turn-publisher.ts";
import { replicasFor } from "./replicas.ts";

/** The subset of a pino logger the bus needs; libraries take a port, not pino itself. */
export interface BusLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface ConnectBusOptions {
  /** Comma-separated NATS URLs. */
  servers: string;
  /** Connection name shown in the server's monitoring, e.g. `zml-intake`. */
  name: string;
  log: BusLogger;
  token?: string;
  /** File holding the nkey seed (`SU…`) of this connection's identity. */
  nkeySeedFile?: string;
  /** PEM CA bundle that verifies the server's certificate; given, the connection uses TLS. */
  caFile?: string;
  /**
   * The identity's private inbox prefix (`inboxPrefixOf`): replies, JetStream acks and KV
   * watch deliveries arrive there, where only this identity may subscribe.
   */
  inboxPrefix?: string;
  /**
   * Accept a bus that also lets anonymous clients in (logged as an error). Without it,
   * {@link connectBus} refuses such a bus with {@link OpenBusError}.
   */
  insecure?: boolean;
  /**
   * Copies of every stream and KV bucket this connection creates (1–5); default 3 on a
   * cluster, 1 on a single server (see {@link replicasFor}).
   */
  replicas?: number;
}

/** The server lets a client in without credentials: anyone on the network reads every prompt. */
export class OpenBusError extends Error {
  readonly code = "open_bus";
  constructor(servers: string) {
    super(
      `the NATS server at ${servers} accepts anonymous clients; refusing to run on an open bus ` +
        "(configure its authorization with `zml bus-credentials`, or set NATS_INSECURE=1 to run anyway)",
    );
    this.name = "OpenBusError";
  }
}

export type ConnectionListener = (connected: boolean) => void;

/**
 * A NATS connection that reconnects forever and tells its owner when it goes up or down.
 * The connection itself stays inside this library: services reach the bus only through the
 * typed helpers (`publishJson`, `requestJson`, `serveJson`, KV, job streams, reply frames).
 */
export interface Bus {
  /** Prefix of this connection's inboxes (`_INBOX` unless an identity prefix was given). */
  readonly inboxPrefix: string;
  /** False between a disconnect and the next reconnect; callers fail fast while it is false. */
  isConnected(): boolean;
  /**
   * Resolves true as soon as the connection is up (at once if it is), false after
   * `timeoutMs` without it: lets a caller ride out a reconnect to another server instead of
   * failing a request that arrived in that fraction of a second.
   */
  waitConnected(timeoutMs: number): Promise<boolean>;
  /** Registers a listener for connection changes; returns a function that removes it. */
  onConnectionChange(listener: ConnectionListener): () => void;
  /**
   * The largest message (body and headers) the connected server takes: its `max_payload`,
   * undefined before it has said.
   */
  maxPayload(): number | undefined;
  /** How many copies the streams and buckets this connection creates or owns get. */
  replicas(): number;
  /**
   * Resolves once the server has processed everything sent so far, subscriptions included:
   * a service that says "ready" after it can really be reached (over TLS the SUB may
   * otherwise still be on its way when the first request comes).
   */
  flush(): Promise<void>;
  /** Drains subscriptions and pending publishes, then closes. */
  drain(): Promise<void>;
}

/**
 * Connects to NATS with reconnect-forever semantics. Status events are logged; listeners
 * learn about disconnects at once so in-flight work can fail fast instead of hanging.
 */
export async function connectBus(options: ConnectBusOptions): Promise<Bus> {
  const servers = options.servers.split(",").map((s) => s.trim());
  const tls = options.caFile ? { tls: { caFile: options.caFile } } : {};
  const nc = await connect({
    servers,
    name: options.name,
    ...tls,
    ...(options.nkeySeedFile
      ? { authenticator: nkeyAuthenticator(readSeed(options.nkeySeedFile)) }
      : {}),
    ...(options.inboxPrefix ? { inboxPrefix: options.inboxPrefix } : {}),
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    reconnectJitter: 100,
    waitOnFirstConnect: true,
    // A dead server is noticed within ~10 s even without a TCP reset.
    pingInterval: 5_000,
    maxPingOut: 2,
    ...(options.token ? { token: options.token } : {}),
  });
  if (await acceptsAnonymous({ servers, ...tls })) {
    if (!options.insecure) {
      await nc.close();
      throw new OpenBusError(options.servers);
    }
    options.log.error(
      { insecure: true },
      "INSECURE: the NATS server accepts anonymous clients; every prompt on this bus is readable by anyone who can reach it",
    );
  } else if (options.insecure && !options.nkeySeedFile) {
    options.log.error({ insecure: true }, "INSECURE: connected to NATS without an identity");
  }
  let connected = true;
  const listeners = new Set<ConnectionListener>();
  const setConnected = (value: boolean) => {
    if (connected === value) return;
    connected = value;
    for (const l of listeners) l(value);
  };
  void (async () => {
    for await (const s of nc.status()) logStatus(options.log, s, setConnected);
  })();
  options.log.info({ server: nc.getServer() }, "nats connected");
  const bus: Bus = {
    inboxPrefix: options.inboxPrefix ?? "_INBOX",
    isConnected: () => connected && !nc.isClosed(),
    maxPayload: () => nc.info?.max_payload,
    replicas: () => replicasFor(nc.info, options.replicas),
    flush: () => nc.flush(),
    onConnectionChange(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    waitConnected(timeoutMs) {
      if (bus.isConnected()) return Promise.resolve(true);
      if (nc.isClosed()) return Promise.resolve(false);
      return new Promise((resolve) => {
        const done = (ok: boolean) => {
          clearTimeout(timer);
          listeners.delete(onChange);
          resolve(ok);
        };
        const onChange = (up: boolean) => {
          if (up) done(true);
        };
        const timer = setTimeout(() => done(false), timeoutMs);
        listeners.add(onChange);
      });
    },
    async drain() {
      if (nc.isClosed()) return;
      setConnected(false);
      // Publishes still waiting for the end of this turn go out with the drain.
      turnPublisherOf(nc).flushNow();
      await nc.drain();
    },
  };
  connections.set(bus, nc);
  return bus;
}

const connections = new WeakMap<Bus, NatsConnection>();

/**
 * The raw connection behind a {@link Bus}. Inside this library it is how the helpers reach
 * NATS; outside it is an escape hatch for tests and tools only (sending malformed bytes,
 * simulating a crash). Lint forbids it in services.
 */
export function natsConnectionOf(bus: Bus): NatsConnection {
  const nc = connections.get(bus);
  if (!nc) throw new Error("not a bus made by connectBus");
  return nc;
}

function readSeed(file: string): Uint8Array {
  return new TextEncoder().encode(readFileSync(file, "utf8").trim());
}

/** Tries a connection without credentials: does the server let anyone in? */
async function acceptsAnonymous(options: ConnectionOptions): Promise<boolean> {
  try {
    const probe = await connect({
      ...options,
      name: "zml-anonymous-probe",
      reconnect: false,
      maxReconnectAttempts: 0,
      timeout: 3_000,
    });
    await probe.close();
    return true;
  } catch {
    // Refused (authorization violation) or unreachable: either way nobody gets in without a key.
    return false;
  }
}

function logStatus(log: BusLogger, s: Status, setConnected: (v: boolean) => void): void {
  switch (s.type) {
    case "disconnect":
      setConnected(false);
      log.warn({ server: s.server }, "nats disconnected");
      break;
    case "reconnecting":
      break;
    case "reconnect":
      setConnected(true);
      log.info({ server: s.server }, "nats reconnected");
      break;
    case "close":
      setConnected(false);
      log.info({}, "nats connection closed");
      break;
    case "error":
      log.error({ err: String(s.error) }, "nats server error");
      break;
    case "staleConnection":
      log.warn({}, "nats connection stale");
      break;
    case "slowConsumer":
      log.warn({ subject: s.sub.getSubject() }, "nats slow consumer");
      break;
    default:
      break;
  }
}
