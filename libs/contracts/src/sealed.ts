/**
 * The tier-4 sealed channel's names and wire layout (`docs/sealed-channel.md`): what a client
 * seals a request to the attested TD with, and what the TD seals its answer back in. Plain
 * constants and types only, so the SDK can bundle them without zod (the envelope's schema, for
 * intake and the TD proxy, is `SealedRequestSchema` in `sealed-schema.ts`).
 */

/**
 * The envelope's version: `zml_sealed` in every sealed request and non-streamed answer. 2: one
 * HPKE setup per channel (a client's session), each request a message of it. Version 1 (an
 * HPKE setup per request) is refused everywhere, naming the version served.
 */
export const SEALED_VERSION = 2;

/** Media type of a sealed request body. */
export const SEALED_REQUEST_MEDIA_TYPE = "application/vnd.zml.sealed-request+json";
/** Media type of a sealed, non-streamed answer (a streamed one is `text/event-stream`). */
export const SEALED_RESPONSE_MEDIA_TYPE = "application/vnd.zml.sealed-response+json";

/**
 * The HPKE suites a request may be sealed with: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256 and
 * the AEAD its name ends in. ChaCha20-Poly1305 is the default (fast without AES hardware).
 */
export const SEALED_SUITES = ["x25519-sha256-chacha20poly1305", "x25519-sha256-aes128gcm"] as const;
export type SealedSuite = (typeof SEALED_SUITES)[number];
export const DEFAULT_SEALED_SUITE: SealedSuite = "x25519-sha256-chacha20poly1305";

/** HPKE `info` of a channel's context (one per client session, its `enc` on every request). */
export const SEALED_CHANNEL_INFO = "zml-sealed/2 channel";
/** Exporter context of the channel's secret every answer's keys are derived from. */
export const SEALED_ANSWER_EXPORT_LABEL = "zml-sealed/2 answer";
/** HKDF-Expand info prefix of an answer's key and base nonce (then its seq and response nonce). */
export const SEALED_ANSWER_KEYS_LABEL = "zml-sealed/2 answer keys";
/** First line of a request's AAD. */
export const SEALED_AAD_PREFIX = "zml-sealed/2";
/** AAD of an answer's last chunk (the others have none), as in chunked OHTTP. */
export const SEALED_FINAL_CHUNK_AAD = "final";
/** Bytes of random response nonce an answer starts with. */
export const SEALED_RESPONSE_NONCE_BYTES = 32;
/** SSE event name of a sealed stream's last chunk: the gateway's sign that it is complete. */
export const SEALED_FINAL_EVENT = "final";
/**
 * Channels (distinct `enc`) one session key opens requests on; a channel is kept as long as
 * its key, so its replay window is never forgotten while its requests could still open.
 */
export const SEALED_MAX_CHANNELS_PER_KEY = 16;
/** How far below the highest opened `seq` of a channel a request may still arrive (reordering). */
export const SEALED_REPLAY_WINDOW = 1024;
/** Largest `seq`: an integer every JSON parser reads exactly. */
export const SEALED_MAX_SEQ = Number.MAX_SAFE_INTEGER;

/** A sealed request body, as JSON (`docs/sealed-channel.md`, "The sealed request"). */
export interface SealedRequestEnvelope {
  zml_sealed: typeof SEALED_VERSION;
  model: string;
  session_id: string;
  tier?: 4;
  policy?: string;
  stream: boolean;
  max_tokens?: number;
  suite: SealedSuite;
  /** Lowercase hex SHA-256 of the session public key's SPKI DER. */
  key_id: string;
  seq: number;
  /** base64url, no padding: the channel's HPKE encapsulated key (32 bytes), on every request of it. */
  enc: string;
  /** base64url, no padding: the sealed OpenAI body. */
  ciphertext: string;
}

/** A sealed, non-streamed answer body. */
export interface SealedResponseEnvelope {
  zml_sealed: typeof SEALED_VERSION;
  /** base64url of the 32 random bytes the answer's keys are derived with (and its `seq`). */
  response_nonce: string;
  /** base64url of each sealed chunk: the head, then the body; the last one sealed as final. */
  chunks: string[];
}

/** The first plaintext chunk of every answer: the TD's server's own status and type. */
export interface SealedResponseHead {
  status: number;
  content_type: string;
}

/** The clear fields a request's AAD binds, in order. */
export interface SealedAadFields {
  path: string;
  model: string;
  session_id: string;
  stream: boolean;
  seq: number;
  suite: SealedSuite;
  key_id: string;
}

/**
 * The AAD a request is sealed with: every clear field the TD acts on, one per line, so a
 * gateway that changes any of them cannot get the request opened. No field may contain a line
 * feed (the envelope's schema holds them to patterns without one).
 */
export function sealedRequestAad(f: SealedAadFields): string {
  return [
    SEALED_AAD_PREFIX,
    f.path,
    f.model,
    f.session_id,
    f.stream ? "1" : "0",
    String(f.seq),
    f.suite,
    f.key_id,
  ].join("\n");
}
