// Fetches a fresh quote from a node's attestation endpoint, over TLS, with the key the node
// presented on that connection.
import { request as httpsRequest } from "node:https";
import type { TLSSocket } from "node:tls";
import { ATTESTATION_FAILURES, NODE_QUOTE_PATH, NodeQuoteResponseSchema } from "@zml/contracts";
import type { NodeQuoteResponse } from "@zml/contracts";
import { certificateKeySha256 } from "@zml/tdx";

/** Quotes are a few KiB and collateral tens of KiB; anything far bigger is not an answer. */
const MAX_RESPONSE_BYTES = 1024 * 1024;

/** The node did not serve a usable quote answer. */
export class QuoteFetchError extends Error {
  readonly code: "quote_unavailable" | "tls_required";
  readonly retryable: boolean;
  constructor(
    message: string,
    cause?: unknown,
    code: "quote_unavailable" | "tls_required" = ATTESTATION_FAILURES.quoteUnavailable,
  ) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "QuoteFetchError";
    this.code = code;
    this.retryable = code === ATTESTATION_FAILURES.quoteUnavailable;
  }
}

export interface QuoteRequestOptions {
  /** Ask for a fresh ephemeral session key bound into REPORTDATA (tier-4 sessions). */
  sessionKey?: boolean | undefined;
  /** With `sessionKey`: the session's lifetime, after which the node drops the key itself. */
  sessionTtlS?: number | undefined;
}

/**
 * `GET <endpoint>/attestation/quote?nonce=<hex>[&session_key=1[&ttl_s=<s>]]`, without a
 * trailing-slash double.
 */
export function quoteUrl(
  endpoint: string,
  nonceHex: string,
  options: QuoteRequestOptions = {},
): string {
  const base = `${endpoint.replace(/\/+$/, "")}${NODE_QUOTE_PATH}?nonce=${nonceHex}`;
  if (options.sessionKey !== true) return base;
  return options.sessionTtlS === undefined
    ? `${base}&session_key=1`
    : `${base}&session_key=1&ttl_s=${options.sessionTtlS}`;
}

/** What a node served, and the TLS key it presented on the connection that served it. */
export interface FetchedQuote {
  answer: NodeQuoteResponse;
  /** SHA-256 (hex) of the SPKI DER of the node's TLS key on that connection. */
  tlsKeySha256: string;
}

/** Status, body and peer key of one GET over its own TLS connection. */
function getOverTls(
  url: string,
  signal: AbortSignal,
): Promise<{ status: number; text: string; tlsKeySha256: string }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      url,
      {
        method: "GET",
        headers: { accept: "application/json" },
        signal,
        // A fresh connection whose key is the one judged; the certificate need not chain to
        // any CA: the quote's REPORTDATA is what vouches for this key.
        agent: false,
        rejectUnauthorized: false,
      },
      (res) => {
        const socket = res.socket as TLSSocket;
        let tlsKeySha256: string;
        try {
          tlsKeySha256 = certificateKeySha256(socket.getPeerCertificate(false).raw);
        } catch (error) {
          res.destroy();
          reject(new QuoteFetchError("the node presented no usable TLS certificate", error));
          return;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.byteLength;
          if (size > MAX_RESPONSE_BYTES) {
            res.destroy();
            reject(new QuoteFetchError(`quote answer exceeds ${MAX_RESPONSE_BYTES} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            text: Buffer.concat(chunks).toString("utf8"),
            tlsKeySha256,
          }),
        );
        res.on("error", (error) =>
          reject(new QuoteFetchError(`quote answer broke off: ${String(error)}`, error)),
        );
      },
    );
    req.on("error", reject);
    req.end();
  });
}

/**
 * Asks the node, over TLS, for a quote bound to `nonceHex` (and to a new session key, when
 * asked), noting the TLS key the node presented. Rejects with {@link QuoteFetchError} on an
 * endpoint that is not `https://`, a network error, a timeout, a non-200 status or an answer
 * that is not `{ quote_b64, collateral?, session_public_key? }`. Whether the quote binds the
 * key and a requested session key is for the verifier to judge.
 */
export async function fetchNodeQuote(
  endpoint: string,
  nonceHex: string,
  timeoutMs: number,
  options: QuoteRequestOptions = {},
): Promise<FetchedQuote> {
  if (!endpoint.startsWith("https://")) {
    throw new QuoteFetchError("the endpoint is not https://", undefined, "tls_required");
  }
  const signal = AbortSignal.timeout(timeoutMs);
  let got: { status: number; text: string; tlsKeySha256: string };
  try {
    got = await getOverTls(quoteUrl(endpoint, nonceHex, options), signal);
  } catch (error) {
    if (error instanceof QuoteFetchError) throw error;
    const why = signal.aborted ? `no answer within ${timeoutMs} ms` : String(error);
    throw new QuoteFetchError(`quote request failed: ${why}`, error);
  }
  if (got.status !== 200) {
    throw new QuoteFetchError(`quote endpoint answered ${got.status}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(got.text);
  } catch {
    throw new QuoteFetchError("quote answer is not JSON");
  }
  const parsed = NodeQuoteResponseSchema.safeParse(json);
  if (!parsed.success) {
    throw new QuoteFetchError(
      `quote answer is malformed: ${parsed.error.issues.map((i) => i.path.join(".") || "(root)").join(", ")}`,
    );
  }
  return { answer: parsed.data, tlsKeySha256: got.tlsKeySha256 };
}
