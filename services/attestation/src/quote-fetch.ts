// Fetches a fresh quote from a node's attestation endpoint.
import { NODE_QUOTE_PATH, NodeQuoteResponseSchema } from "@zml/contracts";
import type { NodeQuoteResponse } from "@zml/contracts";

/** Quotes are a few KiB and collateral tens of KiB; anything far bigger is not an answer. */
const MAX_RESPONSE_BYTES = 1024 * 1024;

/** The node did not serve a usable quote answer. */
export class QuoteFetchError extends Error {
  readonly code = "quote_unavailable";
  readonly retryable = true;
  constructor(message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "QuoteFetchError";
  }
}

export interface QuoteRequestOptions {
  /** Ask for a fresh ephemeral session key bound into REPORTDATA (tier-4 sessions). */
  sessionKey?: boolean | undefined;
}

/**
 * `GET <endpoint>/attestation/quote?nonce=<hex>[&session_key=1]`, without a trailing-slash
 * double.
 */
export function quoteUrl(
  endpoint: string,
  nonceHex: string,
  options: QuoteRequestOptions = {},
): string {
  const base = `${endpoint.replace(/\/+$/, "")}${NODE_QUOTE_PATH}?nonce=${nonceHex}`;
  return options.sessionKey === true ? `${base}&session_key=1` : base;
}

async function readLimited(res: Response): Promise<string> {
  if (!res.body) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    if (size > MAX_RESPONSE_BYTES) {
      await res.body.cancel().catch(() => undefined);
      throw new QuoteFetchError(`quote answer exceeds ${MAX_RESPONSE_BYTES} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/**
 * Asks the node for a quote bound to `nonceHex` (and to a new session key, when asked).
 * Rejects with {@link QuoteFetchError} on a network error, a timeout, a non-200 status or an
 * answer that is not `{ quote_b64, collateral?, session_public_key? }`. Whether a requested
 * session key came back is for the verifier to judge.
 */
export async function fetchNodeQuote(
  endpoint: string,
  nonceHex: string,
  timeoutMs: number,
  options: QuoteRequestOptions = {},
): Promise<NodeQuoteResponse> {
  const signal = AbortSignal.timeout(timeoutMs);
  let res: Response;
  try {
    res = await fetch(quoteUrl(endpoint, nonceHex, options), {
      signal,
      headers: { accept: "application/json" },
      redirect: "error",
    });
  } catch (error) {
    const why = signal.aborted ? `no answer within ${timeoutMs} ms` : String(error);
    throw new QuoteFetchError(`quote request failed: ${why}`, error);
  }
  let text: string;
  try {
    text = await readLimited(res);
  } catch (error) {
    if (error instanceof QuoteFetchError) throw error;
    throw new QuoteFetchError(`quote answer broke off: ${String(error)}`, error);
  }
  if (res.status !== 200) {
    throw new QuoteFetchError(`quote endpoint answered ${res.status}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new QuoteFetchError("quote answer is not JSON");
  }
  const parsed = NodeQuoteResponseSchema.safeParse(json);
  if (!parsed.success) {
    throw new QuoteFetchError(
      `quote answer is malformed: ${parsed.error.issues.map((i) => i.path.join(".") || "(root)").join(", ")}`,
    );
  }
  return parsed.data;
}
