import { readApiJson } from "./answer.ts";
import type { CallOptions, Send } from "./transport.ts";

export interface SessionOptions {
  model: string;
  policy?: string;
  /** Lifetime in seconds (default 3600, at most 86400). */
  ttl_s?: number;
  /** Your nonce for the quote's REPORTDATA (32 bytes, hex); the gateway draws one if absent. */
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
 * Tier-4 sessions: requests that carry the session's id (with `tier: 4`) reach only its
 * attested node, for the session's life; if that node fails the session ends
 * (`session_node_unavailable`), it never fails over.
 */
export interface SessionsApi {
  create(options: SessionOptions, call?: CallOptions): Promise<Session>;
  /** Ends the session; its id is refused afterwards. */
  delete(sessionId: string, call?: CallOptions): Promise<void>;
}

export function createSessionsApi(send: Send): SessionsApi {
  return {
    async create(options, call) {
      return (await readApiJson(await send("POST", "/v1/sessions", options, call))) as Session;
    },
    async delete(sessionId, call) {
      const path = `/v1/sessions/${encodeURIComponent(sessionId)}`;
      await readApiJson(await send("DELETE", path, undefined, call));
    },
  };
}
