import { createHash, generateKeyPairSync } from "node:crypto";
import type { KeyObject } from "node:crypto";
import { AttestationResultSchema, attestationVerdict } from "@zml/contracts";
import { INTEL_SGX_ROOT_CA_PEM } from "@zml/tdx";
import { describe, expect, it } from "vitest";
import { evaluateQuote, sessionKeyBinding } from "../src/evaluate.ts";
import type { EvaluateInput } from "../src/evaluate.ts";
import {
  approved,
  boundReportData,
  COLLATERAL_NEXT_UPDATE,
  collateral,
  MODEL,
  MRTD,
  NONCE,
  node,
  NOW,
  OTHER_MRTD,
  pki,
  policy,
  quote,
  revocation,
  RTMR3,
  TLS_KEY,
} from "./fixtures.ts";

function evaluate(extra: Partial<EvaluateInput> = {}) {
  const result = evaluateQuote({
    node,
    quote: quote(),
    tlsKeySha256: TLS_KEY,
    nonceHex: NONCE,
    approved: [approved()],
    revocations: [],
    policy,
    now: NOW,
    ...extra,
  });
  return AttestationResultSchema.parse(result);
}

describe("evaluateQuote", () => {
  it("passes a good quote and records what a consumer needs", () => {
    const r = evaluate();
    expect(r).toMatchObject({
      node_id: "tee-a",
      tier: 3,
      ok: true,
      reason_code: null,
      reason: null,
      measurement: { mrtd: MRTD, rtmr3: RTMR3, rtmr0: "00".repeat(48) },
      approved_models: [MODEL],
      tcb_status: "UpToDate",
      pck_serial: pki.pck.serial.toLowerCase(),
      fmspc: "30606a000000",
      verified_at: NOW,
      nonce_hex: NONCE,
      revocation: null,
      endpoint: node.endpoint,
      tls_key_sha256: TLS_KEY,
    });
    expect(r.checks.every((c) => c.ok)).toBe(true);
    expect(r.checks.map((c) => c.name)).toEqual(
      expect.arrayContaining(["pck_chain", "tcb_status", "measurements", "report_data"]),
    );
    expect(Buffer.from(r.quote_b64!, "base64").length).toBeGreaterThan(1000);
    expect(attestationVerdict(r, [], NOW + 1, MODEL)).toEqual({ usable: true });
    expect(attestationVerdict(r, [], NOW + 1, "other-model")).toMatchObject({
      reason: "model_not_approved",
    });
  });

  it("never trusts a result past the TTL or the earliest collateral expiry", () => {
    expect(evaluate().expires_at).toBe(NOW + policy.ttlMs);
    const longTtl = evaluate({ policy: { ...policy, ttlMs: 86_400_000 } });
    expect(longTtl.expires_at).toBe(COLLATERAL_NEXT_UPDATE);
  });

  it.each([
    ["an unapproved measurement", { quote: quote({ mrtd: OTHER_MRTD }) }, "measurements"],
    ["a debug TD", { quote: quote({ debug: true }) }, "td_debug"],
    [
      "a replayed quote (another nonce in REPORTDATA)",
      { quote: quote({ reportData: boundReportData("11".repeat(32)) }) },
      "report_data",
    ],
    [
      "a relayed quote (bound to another TLS key than the one presented)",
      { tlsKeySha256: "99".repeat(32) },
      "report_data",
    ],
    [
      "a quote bound to the nonce only (no TLS key)",
      { quote: quote({ reportData: NONCE + "00".repeat(32) }) },
      "report_data",
    ],
    ["a quote without collateral", { quote: quote({}, false) }, "collateral_required"],
    [
      "a chain to another root",
      { policy: { ...policy, trustedRootPem: INTEL_SGX_ROOT_CA_PEM } },
      "pck_chain",
    ],
    ["no approved measurement at all", { approved: [] }, "measurements"],
    ["approval at the other tier only", { approved: [approved({ tier: 4 })] }, "measurements"],
    ["a garbage quote", { quote: { quote_b64: "AAAA" } }, "quote_format"],
  ])("fails %s", (_what, extra: Partial<EvaluateInput>, code) => {
    const r = evaluate(extra);
    expect(r.ok).toBe(false);
    expect(r.reason_code).toBe(code);
    expect(r.reason).toMatch(new RegExp(`^${code}: `));
    expect(r.expires_at).toBe(NOW);
    expect(r.approved_models).toEqual([]);
    expect(r.tls_key_sha256).toBeNull();
    expect(attestationVerdict(r, [], NOW, MODEL)).toMatchObject({
      usable: false,
      reason: "failed",
    });
  });

  it("uses the operator's collateral over what the node serves", () => {
    const stale = { ...collateral, tcb_info_signature: "00".repeat(64) };
    expect(evaluate({ quote: { ...quote(), collateral: stale } }).reason_code).toBe(
      "tcb_info_signature",
    );
    const r = evaluate({
      quote: { ...quote(), collateral: stale },
      policy: { ...policy, collateral },
    });
    expect(r.ok).toBe(true);
  });

  it.each([
    ["node", { node_id: "tee-a" }],
    ["measurement", { mrtd: MRTD }],
    ["PCK serial", { pck_serial: pki.pck.serial }],
    ["FMSPC", { fmspc: "30606A000000" }],
    ["node and FMSPC together", { node_id: "tee-a", fmspc: "30606a000000" }],
  ])("marks a quote revoked by %s", (_what, fields) => {
    const r = evaluate({ revocations: [revocation(fields)] });
    expect(r).toMatchObject({
      ok: false,
      reason_code: "revoked",
      revocation: { id: "r1", reason: "CVE-2026-0001 in the guest kernel" },
      measurement: { mrtd: MRTD },
    });
    expect(attestationVerdict(r, [], NOW, MODEL)).toMatchObject({ reason: "revoked" });
  });

  describe("with a session key", () => {
    const spki = (key: KeyObject) => key.export({ type: "spki", format: "der" });
    const x25519 = () => spki(generateKeyPairSync("x25519").publicKey);
    const key = x25519();
    const b64 = key.toString("base64");
    const binding = createHash("sha256").update(key).digest("hex");
    const bound = () => ({
      ...quote({ reportData: boundReportData(NONCE, binding) }),
      session_public_key: b64,
    });

    it("passes a quote whose REPORTDATA binds the nonce and the key, and returns the key", () => {
      expect(sessionKeyBinding(b64)).toBe(binding);
      const r = evaluate({ quote: bound(), sessionKey: true });
      expect(r).toMatchObject({ ok: true, session_public_key: b64, nonce_hex: NONCE });
      // A background attestation never carries a key, even if the node sends one.
      expect(evaluate({ quote: { ...quote(), session_public_key: b64 } })).toMatchObject({
        ok: true,
        session_public_key: null,
      });
    });

    it.each([
      ["no key served", () => quote(), "session_key"],
      [
        "a key that is not X25519",
        () => ({
          ...bound(),
          session_public_key: spki(generateKeyPairSync("ed25519").publicKey).toString("base64"),
        }),
        "session_key",
      ],
      [
        "a key that is not base64 SPKI",
        () => ({ ...bound(), session_public_key: "AAAA" }),
        "session_key",
      ],
      [
        "a non-canonical base64 key",
        () => ({ ...bound(), session_public_key: `${b64}!` }),
        "session_key",
      ],
      [
        "an unbound key (zero binding)",
        () => ({ ...quote(), session_public_key: b64 }),
        "report_data",
      ],
      [
        "another key than the bound one",
        () => ({ ...bound(), session_public_key: x25519().toString("base64") }),
        "report_data",
      ],
    ])("fails %s", (_what, make, code) => {
      const r = evaluate({ quote: make(), sessionKey: true });
      expect(r).toMatchObject({ ok: false, reason_code: code, approved_models: [] });
      expect(attestationVerdict(r, [], NOW, MODEL).usable).toBe(false);
    });
  });

  it("ignores revocations that match only some of their fields", () => {
    const r = evaluate({
      revocations: [
        revocation({ node_id: "tee-b" }),
        revocation({ id: "r2", mrtd: OTHER_MRTD }),
        revocation({ id: "r3", node_id: "tee-a", fmspc: "000000000000" }),
      ],
    });
    expect(r.ok).toBe(true);
  });
});
