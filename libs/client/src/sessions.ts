import { randomBytes } from "node:crypto";
import { readApiJson } from "./answer.ts";
import { confidentialSession, verifySession } from "./confidential.ts";
import type { ConfidentialSession, SessionTrust } from "./confidential.ts";
import type { CallOptions, Send } from "./transport.ts";
import type { Session } from "./types.ts";

export interface SessionOptions {
  model: string;
  policy?: string;
  /** Lifetime in seconds (default 3600, at most 86400). */
  ttl_s?: number;
  /** Your nonce for the quote's REPORTDATA (32 bytes, hex); a fresh random one by default. */
  nonce?: string;
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
