// The start-up every service process shares, in one order: start-up errors reported, tracing,
// config, logger, graceful stop, metrics; then the ops listener, the bus and the service itself,
// retried until it can start. A service's main.ts keeps only what is its own (its files, its
// ports, what it hands its app).
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { busOptionsOf, connectBus } from "@zml/bus";
import type { Bus } from "@zml/bus";
import {
  createLogger,
  createMetrics,
  startOpsServer,
  startTelemetry,
  withAttemptRegistry,
} from "@zml/telemetry";
import type { Logger, Registry } from "@zml/telemetry";
import { reportStartupErrors } from "./config.ts";
import { createShutdown } from "./shutdown.ts";
import type { ShutdownSettings, StopContext } from "./shutdown.ts";
import { startWhenPossible } from "./start-retry.ts";

type BusSettings = Parameters<typeof busOptionsOf>[0];

/** The settings every service's config holds. */
export type BootConfig = BusSettings & ShutdownSettings & { LOG_LEVEL: string };

/** What a service has besides its name, environment and config. */
export interface ServiceDefinition<C extends BootConfig> {
  /**
   * For services whose replicas tell themselves apart: the configured replica id, or
   * undefined for `<host>-<pid>-<random>`. The id goes on every log line.
   */
  replicaId?: (config: C) => string | undefined;
  /** Where `/healthz`, `/readyz` and `/metrics` listen; a service that serves them itself omits it. */
  ops?: (config: C) => { host: string; port: number };
}

/** A started service, as its app returns it. */
export interface RunningService {
  stop(context: StopContext): Promise<void>;
  /** Readiness beyond "started, bus connected, not stopping". */
  isReady?(): boolean;
}

/** What the service's start is handed. */
export interface ServiceParts<C> {
  config: C;
  log: Logger;
  bus: Bus;
  /** A registry for this start attempt only: a failed attempt's metrics are dropped. */
  registry: Registry;
  /**
   * The process's registry, with Node's own metrics, that `/metrics` serves: for a service
   * that serves `/metrics` itself and registers its metrics only once its start cannot fail.
   */
  servedRegistry: Registry;
  /** The replica id (`""` for a service without one). */
  replica: string;
  /** True from the first stop signal on. */
  isStopping(): boolean;
}

export interface ServeOptions<S> {
  /** Errors that waiting cannot fix (a port in use): thrown at once instead of retried. */
  isPermanent?: (error: unknown) => boolean;
  /** Fields of the "ready" log line. */
  readyFields?: (service: S) => object;
  /** Runs after the service stopped and before the bus drains (agents, other connections). */
  afterStop?: () => Promise<void>;
}

export interface Boot<C> {
  config: C;
  log: Logger;
  replica: string;
  /** A bus connection of the service's own besides its main one (e.g. intake's admin writer). */
  connectAs(identity: string, seedFile: string | undefined, name: string): Promise<Bus>;
  /**
   * Starts the ops listener, connects the bus and starts the service (again and again while
   * NATS or JetStream is away: not-ready, never a crash loop), then stops it on SIGTERM/SIGINT.
   */
  serve<S extends RunningService>(
    start: (parts: ServiceParts<C>) => Promise<S>,
    options?: ServeOptions<S>,
  ): Promise<S>;
}

/**
 * The shared first half of every service's main.ts; see {@link Boot.serve} for the rest.
 * `name` is the service's name (`service` on log lines and metrics, `zml-<name>` for tracing)
 * and its bus identity (see `@zml/bus-auth`). main.ts hands in the environment, so that
 * nothing else reads it.
 */
export function bootService<C extends BootConfig>(
  name: string,
  env: NodeJS.ProcessEnv,
  loadConfig: (env: NodeJS.ProcessEnv) => C,
  definition: ServiceDefinition<C> = {},
): Boot<C> {
  reportStartupErrors(`zml-${name}`);
  // Tracing is instrumented by hand, so the SDK only has to be up before the first message.
  const telemetry = startTelemetry({ serviceName: `zml-${name}`, env });
  const config = loadConfig(env);
  const replica = definition.replicaId
    ? (definition.replicaId(config) ?? generatedReplicaId())
    : "";
  const root = createLogger({ service: name, level: config.LOG_LEVEL });
  const log = replica ? root.child({ replica }) : root;
  const shutdown = createShutdown(log, config);
  const { registry } = createMetrics({ service: name });
  const connectAs = (identity: string, seedFile: string | undefined, connection: string) =>
    connectBus({
      ...busOptionsOf({ ...config, NATS_NKEY_SEED_FILE: seedFile }, identity),
      name: connection,
      log,
    });

  return {
    config,
    log,
    replica,
    connectAs,
    async serve(start, options = {}) {
      // Filled in as start-up gets there. The ops listener comes first: while NATS or
      // JetStream is away it answers not-ready. A signal before the start is done exits at once.
      const started: { bus?: Bus; service?: RunningService } = {};
      const opsAt = definition.ops?.(config);
      const ops = opsAt
        ? await startOpsServer({
            ...opsAt,
            registry,
            isReady: () =>
              !shutdown.stopping &&
              started.bus?.isConnected() === true &&
              started.service !== undefined &&
              started.service.isReady?.() !== false,
            log,
          })
        : undefined;
      const bus = await connectAs(name, config.NATS_NKEY_SEED_FILE, `zml-${name}`);
      started.bus = bus;
      const service = await startWhenPossible(
        () =>
          withAttemptRegistry(registry, (attempt) =>
            start({
              config,
              log,
              bus,
              registry: attempt,
              servedRegistry: registry,
              replica,
              isStopping: () => shutdown.stopping,
            }),
          ),
        {
          what: name,
          log,
          ...(options.isPermanent ? { isPermanent: options.isPermanent } : {}),
        },
      );
      started.service = service;
      log.info(
        { ...(ops ? { ops: ops.url } : {}), ...options.readyFields?.(service) },
        `${name} ready`,
      );
      shutdown.onStop(async (context) => {
        await service.stop(context);
        await options.afterStop?.();
        await bus.drain();
        await ops?.close();
        await telemetry.shutdown();
      });
      return service;
    },
  };
}

/** `<host>-<pid>-<random>`: unique per process, and readable in logs and metrics. */
function generatedReplicaId(): string {
  const host = hostname()
    .replace(/[^A-Za-z0-9_-]/g, "_")
    .slice(0, 40);
  return `${host}-${process.pid}-${randomBytes(3).toString("hex")}`;
}
