// Synthetic TEE material shared by the tests: a test PKI, collateral and quotes.
import { ApprovedMeasurementSchema, RevocationSchema } from "@zml/contracts";
import { reportDataFor } from "@zml/tdx";
import type { ApprovedMeasurement, NodeQuoteResponse, Revocation } from "@zml/contracts";
import { buildTestQuoteV4, createTestTee, TEST_MRTD, TEST_RTMR3 } from "@zml/tdx/testing";
import type { TestQuoteOptions } from "@zml/tdx/testing";
import type { TeeNode, TrustPolicy } from "../src/evaluate.ts";

export const NOW = Date.parse("2026-03-01T12:00:00Z");
export const COLLATERAL_NEXT_UPDATE = NOW + 3_600_000;
export const testTee = createTestTee({
  fmspc: "30606a000000",
  issueDate: new Date(NOW - 86_400_000),
  nextUpdate: new Date(COLLATERAL_NEXT_UPDATE),
});
export const { pki, collateral } = testTee;
export const MRTD = TEST_MRTD;
export const RTMR3 = TEST_RTMR3;
export const OTHER_MRTD = "c4".repeat(48);
export const NONCE = "5a".repeat(32);
export const MODEL = "llama-3.1-8b-instruct";
/** The TLS key hash the test node presents (any 32 bytes: evaluation compares hashes only). */
export const TLS_KEY = "7e".repeat(32);

/** REPORTDATA for the nonce (default {@link NONCE}) and {@link TLS_KEY}, plus a session key. */
export function boundReportData(nonce = NONCE, sessionKeySha256?: string): string {
  return reportDataFor({ nonce, tlsKeySha256: TLS_KEY, sessionKeySha256 });
}

export const node: TeeNode = {
  id: "tee-a",
  tier: 3,
  endpoint: "https://127.0.0.1:1",
  models: [MODEL, "other-model"],
};

export const policy: TrustPolicy = {
  trustedRootPem: pki.root.pem,
  requireCollateral: true,
  acceptableTcbStatuses: ["UpToDate"],
  ttlMs: 300_000,
};

export function approved(extra: Partial<ApprovedMeasurement> = {}): ApprovedMeasurement {
  return ApprovedMeasurementSchema.parse({
    id: "m1",
    model: MODEL,
    tier: 3,
    mrtd: MRTD,
    rtmr3: RTMR3,
    ...extra,
  });
}

export function revocation(fields: Partial<Revocation>): Revocation {
  return RevocationSchema.parse({
    id: "r1",
    reason: "CVE-2026-0001 in the guest kernel",
    revoked_at: NOW,
    ...fields,
  });
}

export function quote(
  extra: Partial<TestQuoteOptions> = {},
  withCollateral = true,
): NodeQuoteResponse {
  const bytes = buildTestQuoteV4({
    mrtd: MRTD,
    rtmr3: RTMR3,
    reportData: boundReportData(),
    ...testTee.signer,
    ...extra,
  });
  return {
    quote_b64: Buffer.from(bytes).toString("base64"),
    ...(withCollateral ? { collateral: { ...collateral } } : {}),
  };
}
