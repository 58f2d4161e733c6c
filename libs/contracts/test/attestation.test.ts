import { describe, expect, it } from "vitest";
import {
  AttestationResultSchema,
  attestationResultSubject,
  AttestationVerifyReplySchema,
  AttestationVerifyRequestSchema,
  attestationVerdict,
  findRevocation,
  InvalidSubjectTokenError,
  isAttestationUsable,
  isTeeTier,
  RevocationSchema,
  revocationMatches,
} from "../src/index.ts";
import type { AttestationResult, Revocation } from "../src/index.ts";
import { attestationResult } from "../src/testing/index.ts";

const NOW = 1_700_000_000_000;
const MRTD = "ab".repeat(48);

const result: AttestationResult = AttestationResultSchema.parse(
  attestationResult({
    measurement: {
      mrtd: MRTD.toUpperCase(),
      rtmr0: "00".repeat(48),
      rtmr1: "00".repeat(48),
      rtmr2: "00".repeat(48),
      rtmr3: "00".repeat(48),
    },
    advisory_ids: ["INTEL-SA-00837"],
    pck_serial: "00f1e2",
    fmspc: "30606a000000",
    verified_at: NOW - 1000,
    expires_at: NOW + 1000,
    quote_b64: "AAAA",
    nonce_hex: "11".repeat(32),
    checks: [{ name: "pck_chain", ok: true, detail: "pinned" }],
    tls_key_sha256: "c0".repeat(32),
  }),
);

const revoke = (fields: Record<string, string>): Revocation =>
  RevocationSchema.parse({ id: "r1", reason: "advisory", revoked_at: NOW, ...fields });

describe("attestation contract", () => {
  it("builds per-node result subjects and refuses wildcards", () => {
    expect(attestationResultSubject("tee-a")).toBe("zml.attestation.result.tee-a");
    expect(() => attestationResultSubject("a.*")).toThrow(InvalidSubjectTokenError);
  });

  it("knows the attested tiers", () => {
    expect([1, 2, 3, 4].map(isTeeTier)).toEqual([false, false, true, true]);
  });

  it("validates verify requests and replies", () => {
    const ok = { type: "attestation.verify.v1", node_id: "tee-a" };
    expect(AttestationVerifyRequestSchema.safeParse(ok).success).toBe(true);
    expect(AttestationVerifyRequestSchema.safeParse({ ...ok, nonce: "AB" }).success).toBe(false);
    expect(AttestationVerifyRequestSchema.safeParse({ ...ok, extra: 1 }).success).toBe(false);
    const reply = AttestationVerifyReplySchema.parse({
      type: "attestation.verify.reply.v1",
      error: { code: "unknown_node", message: "no node" },
    });
    expect("error" in reply && reply.error.code).toBe("unknown_node");
    expect("result" in AttestationVerifyReplySchema.parse({ type: reply.type, result })).toBe(true);
  });

  it.each([
    [{ node_id: "tee-a" }, true],
    [{ node_id: "tee-b" }, false],
    [{ mrtd: MRTD }, true],
    [{ fmspc: "30606A000000" }, true],
    [{ pck_serial: "F1E2" }, true], // leading zeros and case do not matter
    [{ pck_serial: "f1e3" }, false],
    [{ advisory_id: "INTEL-SA-00837" }, true],
    [{ advisory_id: "INTEL-SA-00001" }, false],
    [{ node_id: "tee-a", fmspc: "000000000000" }, false], // every field set must match
  ])("matches revocation %j: %s", (fields, expected) => {
    expect(revocationMatches(revoke(fields), result)).toBe(expected);
  });

  it("does not match a subject that lacks the revoked field", () => {
    expect(revocationMatches(revoke({ mrtd: MRTD }), { node_id: "tee-a" })).toBe(false);
    expect(
      findRevocation([revoke({ node_id: "x" }), revoke({ node_id: "tee-a" })], result),
    ).toBeDefined();
  });

  it("decides usability from memory, failing closed", () => {
    expect(attestationVerdict(result, [], NOW, "m")).toEqual({ usable: true });
    expect(attestationVerdict(undefined, [], NOW).usable).toBe(false);
    expect(attestationVerdict(result, [revoke({ node_id: "tee-a" })], NOW)).toMatchObject({
      reason: "revoked",
      detail: "revoked (r1): advisory",
    });
    expect(attestationVerdict({ ...result, ok: false, reason: "x" }, [], NOW)).toMatchObject({
      reason: "failed",
    });
    expect(
      attestationVerdict(
        { ...result, ok: false, reason_code: "revoked", reason: "revoked (r9): gone" },
        [],
        NOW,
      ),
    ).toMatchObject({ reason: "revoked" });
    expect(attestationVerdict(result, [], NOW + 1000)).toMatchObject({ reason: "expired" });
    expect(attestationVerdict(result, [], NOW, "other")).toMatchObject({
      reason: "model_not_approved",
    });
    expect(isAttestationUsable(result, new Map<string, Revocation>().values(), NOW)).toBe(true);
  });

  it("holds only for the endpoint it was made at, and only with a bound TLS key", () => {
    const here = { endpoint: "https://tee-a.example:8443" };
    expect(attestationVerdict(result, [], NOW, "m", here)).toEqual({ usable: true });
    expect(
      attestationVerdict(result, [], NOW, "m", { endpoint: "https://elsewhere.example:8443" }),
    ).toMatchObject({ usable: false, reason: "endpoint_changed" });
    expect(attestationVerdict({ ...result, tls_key_sha256: null }, [], NOW)).toMatchObject({
      usable: false,
      reason: "unbound",
    });
    // Results written before channel binding parse, and are never usable.
    const legacy: Partial<AttestationResult> = { ...result };
    delete legacy.endpoint;
    delete legacy.tls_key_sha256;
    const parsed = AttestationResultSchema.parse(legacy);
    expect(parsed.tls_key_sha256).toBeNull();
    expect(attestationVerdict(parsed, [], NOW, "m").usable).toBe(false);
  });
});
