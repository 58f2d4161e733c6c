// Channel binding on the dispatcher side: a tier 3/4 connection carries a payload only once
// the node has shown, in the TLS handshake, the very key its attestation binds.
import { X509Certificate } from "node:crypto";
import type { TLSSocket } from "node:tls";
import { spkiSha256 } from "@zml/tdx";
import { buildConnector } from "undici";

/** The node presented another TLS key than the attested one: nothing was sent on it. */
export class TlsKeyMismatchError extends Error {
  readonly code = "tls_key_mismatch";
  readonly retryable = true;
  readonly nodeId: string;
  readonly seen: string | null;
  constructor(nodeId: string, seen: string | null) {
    super(
      seen === null
        ? `node ${nodeId}: no attested TLS key to pin; connection refused`
        : `node ${nodeId} presented TLS key ${seen.slice(0, 16)}…, not the attested one`,
    );
    this.name = "TlsKeyMismatchError";
    this.nodeId = nodeId;
    this.seen = seen;
  }
}

/** SHA-256 of the SPKI DER of the key in the peer's certificate, or null without one. */
export function peerKeySha256(socket: TLSSocket): string | null {
  const cert = socket.getPeerCertificate(false);
  if (!cert || !Buffer.isBuffer(cert.raw)) return null;
  try {
    return spkiSha256(new X509Certificate(cert.raw).publicKey);
  } catch {
    return null;
  }
}

export interface PinnedConnectorOptions {
  nodeId: string;
  /** The attested key hash this connection must present; undefined refuses every connection. */
  pin(): string | undefined;
  /** Called with what the node presented when it was not the pinned key. */
  onMismatch(nodeId: string, seen: string | null): void;
  timeoutMs: number;
  /**
   * The connector that makes the TLS connection (default: one that takes any certificate and
   * resumes no session); the pool passes its address-guarded one.
   */
  base?: buildConnector.connector;
}

/**
 * An undici connector that completes the TLS handshake, takes any certificate (the quote,
 * not a CA, vouches for the key), and hands the socket to the pool only when the peer's
 * public key hashes to the pin; otherwise it destroys the socket before a byte of the
 * request is written and fails the connect with {@link TlsKeyMismatchError}. TLS session
 * resumption is off, so every connection shows its certificate.
 */
export function pinnedConnector(options: PinnedConnectorOptions): buildConnector.connector {
  const connect =
    options.base ??
    buildConnector({ rejectUnauthorized: false, maxCachedSessions: 0, timeout: options.timeoutMs });
  return (connectOptions, callback) => {
    if (connectOptions.protocol !== "https:") {
      callback(new TlsKeyMismatchError(options.nodeId, null), null);
      return;
    }
    connect(connectOptions, (err, socket) => {
      if (err !== null) {
        callback(err, null);
        return;
      }
      const seen = peerKeySha256(socket as TLSSocket);
      const pin = options.pin();
      if (pin === undefined || seen !== pin) {
        socket.destroy();
        if (pin !== undefined) options.onMismatch(options.nodeId, seen);
        callback(new TlsKeyMismatchError(options.nodeId, pin === undefined ? null : seen), null);
        return;
      }
      callback(null, socket);
    });
  };
}
