import { BUS_CONFIG_SHAPE, requireBusIdentity } from "@zml/bus";
import { parseConfig, SHUTDOWN_CONFIG_SHAPE } from "@zml/runtime";
import { TCB_STATUSES } from "@zml/tdx";
import { z } from "zod";

const flag = (fallback: "true" | "false") =>
  z
    .enum(["true", "false"])
    .default(fallback)
    .transform((v) => v === "true");

const ConfigSchema = z
  .object({
    ...BUS_CONFIG_SHAPE,
    ...SHUTDOWN_CONFIG_SHAPE,
    ATTESTATION_OPS_PORT: z.coerce.number().int().min(0).max(65535).default(9103),
    ATTESTATION_OPS_HOST: z.string().default("127.0.0.1"),
    LOG_LEVEL: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"),
    /**
     * How long a passed attestation is trusted (it never outlives the certificates and
     * collateral it was verified with). Nodes are re-attested after half of it.
     */
    ATTESTATION_TTL_MS: z.coerce.number().int().min(1_000).default(300_000),
    /** Delay before a failed attestation is tried again. */
    ATTESTATION_RETRY_MS: z.coerce.number().int().min(100).default(15_000),
    /** Limit on fetching one quote from a node. */
    ATTESTATION_QUOTE_TIMEOUT_MS: z.coerce.number().int().positive().default(5_000),
    /**
     * PEM file of the trust anchor. Default: Intel's SGX Root CA, pinned in `@zml/tdx`. Dev
     * stacks and tests point it at the simulator's synthetic root.
     */
    ATTESTATION_TRUST_ROOT_PEM_FILE: z.string().min(1).optional(),
    /**
     * JSON file of Intel collateral (dcap-qvl form) for a fleet of one platform type (one
     * FMSPC), fetched from Intel PCS / a PCCS by the operator. When unset, collateral served
     * by the node with its quote is used.
     */
    ATTESTATION_COLLATERAL_FILE: z.string().min(1).optional(),
    /** Fail attestations without collateral (no TCB status, no CRL check). */
    ATTESTATION_REQUIRE_COLLATERAL: flag("true"),
    /** TCB statuses accepted, comma-separated (`Revoked` is never accepted). */
    ATTESTATION_TCB_STATUSES: z
      .string()
      .default("UpToDate")
      .transform((s) => s.split(",").map((v) => v.trim()))
      .pipe(z.array(z.enum(TCB_STATUSES)).min(1)),
  })
  .refine(...requireBusIdentity);

export type AttestationConfig = z.output<typeof ConfigSchema>;

export function loadConfig(env: Record<string, string | undefined>): AttestationConfig {
  return parseConfig(ConfigSchema, env);
}
