import { randomBytes } from "node:crypto";
import { readApiJson } from "./answer.ts";
import { confidentialSession, verifySession } from "./confidential.ts";
import type { ConfidentialSession, SessionTrust } from "./confidential.ts";
import type { CallOptions, Send } from "./transport.ts";

export interface SessionOptions {
  model: string;
  policy?: string;
  /** Lifetime in seconds (default 3600, at most 86400). */
  ttl_s?: number;
  /** Your nonce for the quote's REPORTDATA (32 bytes, hex); a fresh random one by default. */
  nonce?: string;
}

/** `POST /v1/sessions` answer. Times are epoch milliseconds. */
export interface Session {
  object: "session";
  session_id: string;
  node_id: string;
  model: string;
  tier: number;
  created_at: number;
  expires_at: number;
  /**
   * The node's TDX quote: its REPORTDATA binds `nonce_hex`, the node's TLS key and
   * `session_public_key` (X25519, base64 SPKI DER); layout in `libs/tdx/README.md`.
   * Verifiable with Intel DCAP tooling.
   */
  attestation: {
    quote_b64: string;
    nonce_hex: string;
    session_public_key: string;
    /** SHA-256 (hex) of the SPKI DER of the TLS key the node attested with. */
    tls_key_sha256: string | null;
    measurement: Record<string, unknown>;
    tcb_status: string | null;
    verified_at: number;
  };
}

/**
 * Tier-4 sessions, end to end: `create` opens a session pinned to one attested node, verifies
 * its quote here (its nonce, the measurement, and that it binds the session key), and returns
 * a session that seals every request to that key and opens every answer, so the gateway
 * carries only ciphertext. If the node fails the session ends (`session_node_unavailable`);
 * it never fails over: open a new one.
 */
export interface SessionsApi {
  /** @throws ZmlAttestationError when the node's quote does not verify (the session is ended). */
  create(options: SessionOptions & SessionTrust, call?: CallOptions): Promise<ConfidentialSession>;
  /** Ends the session; its id is refused afterwards. */
  delete(sessionId: string, call?: CallOptions): Promise<void>;
}

export function createSessionsApi(send: Send): SessionsApi {
  const remove = async (sessionId: string, call?: CallOptions) => {
    const path = `/v1/sessions/${encodeURIComponent(sessionId)}`;
    await readApiJson(await send("DELETE", path, undefined, call));
  };
  return {
    async create(options, call) {
      const { approvedMeasurements, trustedRootPem, suite, ...request } = options;
      const nonce = request.nonce ?? randomBytes(32).toString("hex");
      const ex = await send("POST", "/v1/sessions", { ...request, nonce }, call);
      const session = (await readApiJson(ex)) as Session;
      let verification;
      try {
        verification = await verifySession(send, session, nonce, {
          ...(approvedMeasurements === undefined ? {} : { approvedMeasurements }),
          ...(trustedRootPem === undefined ? {} : { trustedRootPem }),
        });
      } catch (error) {
        // Nothing was sealed to the session; it is not left open either.
        await remove(session.session_id).catch(() => undefined);
        throw error;
      }
      return confidentialSession(send, session, verification, suite, remove);
    },
    delete: remove,
  };
}
