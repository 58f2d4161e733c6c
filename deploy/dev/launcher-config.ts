// The dev launcher's settings: every port it binds can be moved (0 = any free port), so the
// launcher can run beside another copy of itself, or beside the test suite.
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { BUS_CONFIG_SHAPE } from "@zml/bus";
import { parseConfig } from "@zml/runtime";
import { z } from "zod";

const port = (fallback: number) => z.coerce.number().int().min(0).max(65535).default(fallback);

const LauncherSchema = z
  .object({
    /** Intake's HTTP port (the services read the same variable). */
    ZML_PORT: port(8080),
    /** Client port of the nats-server the launcher starts (ignored with NATS_URL). */
    ZML_NATS_PORT: port(4222),
    /** Ops ports (/healthz, /readyz, /metrics): the services read the same variables. */
    DISPATCHER_OPS_PORT: port(9101),
    AGGREGATOR_OPS_PORT: port(9102),
    ATTESTATION_OPS_PORT: port(9103),
    /**
     * Unset: each simulated node listens on its endpoint's port from the fleet file. A number:
     * the simulated nodes take consecutive ports from it, 0 any free ones; the endpoints applied
     * to the fleet follow.
     */
    ZML_SIM_PORT_BASE: z.coerce.number().int().min(0).max(65535).optional(),
    ZML_FLEET_FILE: z.string().min(1).optional(),
    ZML_DEMO_API_KEY: z.string().min(8, "at least 8 characters").default("zml-demo-key"),
    // The same rule as intake's: checked here so a bad token fails before anything starts.
    ZML_ADMIN_TOKEN: z.string().min(16, "at least 16 characters").optional(),
    NATS_URL: z.string().min(1).optional(),
    /**
     * With NATS_URL: run on that server without identities (the launcher has none for it), as
     * the services do with the same setting. Without NATS_URL it changes nothing: the launcher's
     * own server has an identity for each of them.
     */
    NATS_INSECURE: BUS_CONFIG_SHAPE.NATS_INSECURE,
    LOG_LEVEL: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("warn"),
    /** `llamacpp`: add one real llama.cpp node (llama-server and a tiny generated model). */
    ZML_REAL_NODE: z.enum(["llamacpp"]).optional(),
  })
  .refine((c) => c.NATS_URL === undefined || c.NATS_INSECURE, {
    message: "required with NATS_URL: the launcher has no bus identities for that server",
    path: ["NATS_INSECURE"],
  });

const FIXES = {
  ZML_ADMIN_TOKEN:
    "set ZML_ADMIN_TOKEN to a random secret of at least 16 characters (e.g. `openssl rand -hex 24`), or unset it and the launcher generates one",
  ZML_DEMO_API_KEY: "set ZML_DEMO_API_KEY to a key of at least 8 characters, or unset it",
  ZML_REAL_NODE:
    "set ZML_REAL_NODE=llamacpp to add a real llama.cpp node to the demo fleet, or unset it",
  NATS_INSECURE:
    "set NATS_INSECURE=1 to run on the server in NATS_URL without identities (it must accept anonymous clients; every service logs that loudly), or unset NATS_URL and the launcher starts its own secured nats-server",
};

export interface LauncherConfig {
  ports: {
    intake: number;
    nats: number;
    dispatcherOps: number;
    aggregatorOps: number;
    attestationOps: number;
  };
  simPortBase: number | undefined;
  fleetFile: string;
  apiKey: string;
  adminToken: string;
  /** True when the admin token was generated for this run (and must be printed). */
  adminTokenGenerated: boolean;
  natsUrl: string | undefined;
  /** Only ever true with `natsUrl`: the user's server, used without identities. */
  natsInsecure: boolean;
  logLevel: string;
  /** A real engine to add to the fleet as one more node. */
  realNode: "llamacpp" | undefined;
}

/** Reads the launcher's environment; throws `ConfigError` listing every bad setting. */
export function loadLauncherConfig(
  env: Record<string, string | undefined>,
  root: string,
): LauncherConfig {
  const c = parseConfig(LauncherSchema, env, FIXES);
  return {
    ports: {
      intake: c.ZML_PORT,
      nats: c.ZML_NATS_PORT,
      dispatcherOps: c.DISPATCHER_OPS_PORT,
      aggregatorOps: c.AGGREGATOR_OPS_PORT,
      attestationOps: c.ATTESTATION_OPS_PORT,
    },
    simPortBase: c.ZML_SIM_PORT_BASE,
    fleetFile: c.ZML_FLEET_FILE ?? join(root, "deploy/config/dev-fleet.yaml"),
    apiKey: c.ZML_DEMO_API_KEY,
    // A fixed demo token would be a known default; a fresh one per run is printed instead.
    adminToken: c.ZML_ADMIN_TOKEN ?? `zml-dev-${randomBytes(18).toString("base64url")}`,
    adminTokenGenerated: c.ZML_ADMIN_TOKEN === undefined,
    natsUrl: c.NATS_URL,
    natsInsecure: c.NATS_URL !== undefined && c.NATS_INSECURE,
    logLevel: c.LOG_LEVEL,
    realNode: c.ZML_REAL_NODE,
  };
}
