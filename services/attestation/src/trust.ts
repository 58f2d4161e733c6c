// Reads the trust anchor and optional collateral named by the configuration, once at start.
import { X509Certificate } from "node:crypto";
import { INTEL_SGX_ROOT_CA_PEM } from "@zml/tdx";
import type { Collateral } from "@zml/tdx";
import type { AttestationConfig } from "./config.ts";
import type { TrustPolicy } from "./evaluate.ts";

/** The configured trust material is unusable; the service must not start. */
export class TrustConfigError extends Error {
  readonly code = "invalid_trust_config";
  constructor(message: string) {
    super(message);
    this.name = "TrustConfigError";
  }
}

export interface LoadedTrust {
  policy: TrustPolicy;
  /** False when a root other than Intel's is configured (dev and tests only). */
  intelRoot: boolean;
}

export async function loadTrust(
  config: AttestationConfig,
  readText: (path: string) => Promise<string>,
): Promise<LoadedTrust> {
  const read = async (variable: string, path: string) => {
    try {
      return await readText(path);
    } catch (error) {
      throw new TrustConfigError(`${variable}: cannot read ${path}: ${String(error)}`);
    }
  };
  const rootFile = config.ATTESTATION_TRUST_ROOT_PEM_FILE;
  const rootPem = rootFile
    ? await read("ATTESTATION_TRUST_ROOT_PEM_FILE", rootFile)
    : INTEL_SGX_ROOT_CA_PEM;
  let root: X509Certificate;
  try {
    root = new X509Certificate(rootPem);
  } catch {
    throw new TrustConfigError(
      `ATTESTATION_TRUST_ROOT_PEM_FILE: ${rootFile} is not a PEM certificate`,
    );
  }
  let collateral: Collateral | undefined;
  const collateralFile = config.ATTESTATION_COLLATERAL_FILE;
  if (collateralFile) {
    try {
      collateral = JSON.parse(
        await read("ATTESTATION_COLLATERAL_FILE", collateralFile),
      ) as Collateral;
    } catch (error) {
      if (error instanceof TrustConfigError) throw error;
      throw new TrustConfigError(`ATTESTATION_COLLATERAL_FILE: ${collateralFile} is not JSON`);
    }
  }
  return {
    policy: {
      trustedRootPem: rootPem,
      requireCollateral: config.ATTESTATION_REQUIRE_COLLATERAL,
      acceptableTcbStatuses: config.ATTESTATION_TCB_STATUSES,
      ttlMs: config.ATTESTATION_TTL_MS,
      ...(collateral ? { collateral } : {}),
    },
    intelRoot: root.raw.equals(new X509Certificate(INTEL_SGX_ROOT_CA_PEM).raw),
  };
}
