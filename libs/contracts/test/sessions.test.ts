import { describe, expect, it } from "vitest";
import {
  AttestationResultSchema,
  AttestationVerifyRequestSchema,
  ERROR_CODES,
  isSessionId,
  SESSION_ID_PATTERN,
  SessionCreateReplySchema,
  SessionCreateRequestSchema,
  SessionSchema,
} from "../src/index.ts";

const NONCE = "11".repeat(32);
const session = {
  type: "session.v1",
  session_id: `ses-${"ab".repeat(16)}`,
  account: "acme",
  model: "llama",
  node_id: "t4-a",
  tier: 4,
  policy: "balanced",
  created_at: 1,
  expires_at: 2,
  attestation: {
    quote_b64: "AAAA",
    nonce_hex: NONCE,
    session_public_key: "BBBB",
    measurement: {
      mrtd: "A1".repeat(48),
      rtmr0: "00".repeat(48),
      rtmr1: "00".repeat(48),
      rtmr2: "00".repeat(48),
      rtmr3: "00".repeat(48),
    },
    tcb_status: null,
    verified_at: 1,
  },
};

describe("session contract", () => {
  it("parses a session, defaulting what older writers left out", () => {
    const s = SessionSchema.parse(session);
    expect(s).toMatchObject({ ended: null, node_instance_id: null });
    expect(s.attestation.measurement.mrtd).toBe("a1".repeat(48));
    expect(SessionSchema.safeParse({ ...session, tier: 3 }).success).toBe(false);
    expect(SessionSchema.safeParse({ ...session, session_id: "ses:1" }).success).toBe(false);
  });

  it("issues ids that are KV keys and valid chat session_id values", () => {
    expect(isSessionId(session.session_id)).toBe(true);
    expect(SESSION_ID_PATTERN.test(session.session_id)).toBe(true);
    for (const id of ["ses-AB", "ses:x", `ses-${"ab".repeat(16)}0`, ""]) {
      expect(isSessionId(id), id).toBe(false);
    }
  });

  it("bounds the create request and answers with a session or an API error", () => {
    const ok = { type: "session.create.v1", account: "acme", model: "llama" };
    expect(SessionCreateRequestSchema.safeParse({ ...ok, ttl_s: 60, nonce: NONCE }).success).toBe(
      true,
    );
    for (const bad of [{ ttl_s: 0 }, { ttl_s: 86_401 }, { nonce: "abc" }, { tier: 4 }]) {
      expect(SessionCreateRequestSchema.safeParse({ ...ok, ...bad }).success).toBe(false);
    }
    const type = "session.create.reply.v1";
    expect(SessionCreateReplySchema.parse({ type, session })).toHaveProperty("session");
    const error = { code: "session_node_unavailable", message: "x" };
    expect(SessionCreateReplySchema.parse({ type, error })).toMatchObject({
      error: { param: null },
    });
  });

  it("maps the session errors: gone is 404, expired 410, a failed node 503 for good", () => {
    expect(ERROR_CODES.session_not_found).toEqual({ status: 404, retryable: false });
    expect(ERROR_CODES.session_expired).toEqual({ status: 410, retryable: false });
    expect(ERROR_CODES.session_node_unavailable).toEqual({ status: 503, retryable: false });
  });

  it("reads attestation results written before session keys existed", () => {
    const old = {
      type: "attestation.result.v1",
      node_id: "t4-a",
      tier: 4,
      ok: false,
      reason_code: "quote_unavailable",
      reason: "down",
      measurement: null,
      approved_models: [],
      tcb_status: null,
      advisory_ids: [],
      pck_serial: null,
      fmspc: null,
      verified_at: 1,
      expires_at: 1,
      quote_b64: null,
      nonce_hex: null,
      checks: [],
      revocation: null,
    };
    expect(AttestationResultSchema.parse(old).session_public_key).toBeNull();
  });

  it("asks for a session key only together with a nonce", () => {
    const base = { type: "attestation.verify.v1", node_id: "t4-a" };
    const parse = (extra: object) =>
      AttestationVerifyRequestSchema.safeParse({ ...base, ...extra });
    expect(parse({ nonce: NONCE, session_key: true }).success).toBe(true);
    expect(parse({ session_key: false }).success).toBe(true);
    const bad = parse({ session_key: true });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.path).toEqual(["session_key"]);
  });
});
