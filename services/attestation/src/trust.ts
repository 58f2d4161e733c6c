// Reads the trust anchor and optional collateral named by the configuration, once at start.
import { X509Certificate } from "node:crypto";
import { ConfigError, configProblem } from "@zml/runtime";
import { INTEL_SGX_ROOT_CA_PEM } from "@zml/tdx";
import type { Collateral } from "@zml/tdx";
import type { AttestationConfig } from "./config.ts";
import type { TrustPolicy } from "./evaluate.ts";

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
      const reason = (error as NodeJS.ErrnoException).code ?? String(error);
      throw configProblem(
        variable,
        `cannot read ${path} (${reason})`,
        `point ${variable} at a readable file, or unset it`,
      );
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
    throw configProblem(
      "ATTESTATION_TRUST_ROOT_PEM_FILE",
      `${rootFile} is not a PEM certificate`,
      "point it at the PEM root CA that signs the PCK chain (unset: Intel's SGX root CA)",
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
      if (error instanceof ConfigError) throw error;
      throw configProblem(
        "ATTESTATION_COLLATERAL_FILE",
        `${collateralFile} is not JSON`,
        "point it at a collateral JSON file (see libs/tdx/README.md), or unset it",
      );
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
