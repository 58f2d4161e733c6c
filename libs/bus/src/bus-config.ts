import { inboxPrefixOf } from "@zml/contracts";
import { z } from "zod";

const flag = z
  .enum(["1", "0", "true", "false", "yes", "no"])
  .transform((v) => v === "1" || v === "true" || v === "yes");

/**
 * The bus settings every service reads from its environment; spread into the service's
 * config schema and check it with {@link requireBusIdentity}.
 */
export const BUS_CONFIG_SHAPE = {
  NATS_URL: z.string().min(1).default("nats://127.0.0.1:4222"),
  /** File holding this service's nkey seed (`SU…`), made by `zml bus-credentials`. */
  NATS_NKEY_SEED_FILE: z.string().min(1).optional(),
  /** PEM CA that signed the server's certificate; set, the connection requires TLS. */
  NATS_CA_FILE: z.string().min(1).optional(),
  /**
   * Run without an identity, or on a bus that also accepts anonymous clients. For
   * experiments only: it is logged loudly at start-up.
   */
  NATS_INSECURE: flag.default(false),
  /**
   * Copies of every stream and KV bucket this service creates or owns; applied to existing
   * ones on start. Default: 3 on a NATS cluster, 1 on a single server.
   */
  NATS_REPLICAS: z.coerce.number().int().min(1).max(5).optional(),
};

interface BusConfig {
  NATS_URL: string;
  NATS_NKEY_SEED_FILE?: string | undefined;
  NATS_CA_FILE?: string | undefined;
  NATS_INSECURE: boolean;
  NATS_REPLICAS?: number | undefined;
}

/** Refinement for a service config: an identity is required unless NATS_INSECURE is set. */
export const requireBusIdentity: [
  (c: BusConfig) => boolean,
  { message: string; path: PropertyKey[] },
] = [
  (c) => c.NATS_INSECURE || c.NATS_NKEY_SEED_FILE !== undefined,
  {
    message:
      "required: every service connects to NATS with its own identity (generate one with " +
      "`zml bus-credentials`); NATS_INSECURE=1 runs without one",
    path: ["NATS_NKEY_SEED_FILE"],
  },
];

/** The connection options of a service running as `identity`, from its parsed config. */
export function busOptionsOf(config: BusConfig, identity: string) {
  return {
    servers: config.NATS_URL,
    inboxPrefix: inboxPrefixOf(identity),
    insecure: config.NATS_INSECURE,
    ...(config.NATS_REPLICAS !== undefined ? { replicas: config.NATS_REPLICAS } : {}),
    ...(config.NATS_NKEY_SEED_FILE ? { nkeySeedFile: config.NATS_NKEY_SEED_FILE } : {}),
    ...(config.NATS_CA_FILE ? { caFile: config.NATS_CA_FILE } : {}),
  };
}
