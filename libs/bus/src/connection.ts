import { connect } from "@nats-io/transport-node";
import type { NatsConnection, Status } from "@nats-io/nats-core";

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
}

export type ConnectionListener = (connected: boolean) => void;

/**
 * A NATS connection that reconnects forever and tells its owner when it goes up or down.
 * The connection itself stays inside this library: services reach the bus only through the
 * typed helpers (`publishJson`, `requestJson`, `serveJson`, KV, job streams, reply frames).
 */
export interface Bus {
  /** False between a disconnect and the next reconnect; callers fail fast while it is false. */
  isConnected(): boolean;
  /** Registers a listener for connection changes; returns a function that removes it. */
  onConnectionChange(listener: ConnectionListener): () => void;
  /**
   * The largest message (body and headers) the connected server takes: its `max_payload`,
   * undefined before it has said.
   */
  maxPayload(): number | undefined;
  /** Drains subscriptions and pending publishes, then closes. */
  drain(): Promise<void>;
}

/**
 * Connects to NATS with reconnect-forever semantics. Status events are logged; listeners
 * learn about disconnects at once so in-flight work can fail fast instead of hanging.
 */
export async function connectBus(options: ConnectBusOptions): Promise<Bus> {
  const nc = await connect({
    servers: options.servers.split(",").map((s) => s.trim()),
    name: options.name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    reconnectJitter: 100,
    waitOnFirstConnect: true,
    // A dead server is noticed within ~10 s even without a TCP reset.
    pingInterval: 5_000,
    maxPingOut: 2,
    ...(options.token ? { token: options.token } : {}),
  });
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
    isConnected: () => connected && !nc.isClosed(),
    maxPayload: () => nc.info?.max_payload,
    onConnectionChange(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    async drain() {
      if (nc.isClosed()) return;
      setConnected(false);
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
