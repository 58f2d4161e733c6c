// One attestation of one node: fetch a quote for a nonce, then judge it. Fails closed: every
// error becomes an `ok: false` result with a reason.
import { ATTESTATION_FAILURES } from "@zml/contracts";
import type { ApprovedMeasurement, AttestationResult, Revocation } from "@zml/contracts";
import { evaluateQuote, failedResult } from "./evaluate.ts";
import type { TeeNode, TrustPolicy } from "./evaluate.ts";
import { QuoteFetchError } from "./quote-fetch.ts";
import type { FetchedQuote, QuoteRequestOptions } from "./quote-fetch.ts";

export interface AttestorDeps {
  fetchQuote(node: TeeNode, nonceHex: string, options: QuoteRequestOptions): Promise<FetchedQuote>;
  /** Current approved measurements and revocation list (in-memory KV mirrors). */
  approved(): Iterable<ApprovedMeasurement>;
  revocations(): Iterable<Revocation>;
  policy: TrustPolicy;
  now(): number;
}

/**
 * Attests a node with a nonce, and with `sessionKey` also checks the ephemeral session key
 * the node must bind into REPORTDATA; never rejects.
 */
export type Attest = (
  node: TeeNode,
  nonceHex: string,
  options?: QuoteRequestOptions,
) => Promise<AttestationResult>;

export function createAttestor(deps: AttestorDeps): Attest {
  return async (node, nonceHex, options = {}) => {
    let fetched: FetchedQuote;
    try {
      fetched = await deps.fetchQuote(node, nonceHex, options);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      const code =
        error instanceof QuoteFetchError ? error.code : ATTESTATION_FAILURES.quoteUnavailable;
      return failedResult(node, deps.now(), code, reason, nonceHex);
    }
    // Revocations and approvals are read after the fetch, so a change that landed while the
    // quote was on its way is already applied.
    return evaluateQuote({
      node,
      quote: fetched.answer,
      tlsKeySha256: fetched.tlsKeySha256,
      nonceHex,
      sessionKey: options.sessionKey === true,
      approved: deps.approved(),
      revocations: deps.revocations(),
      policy: deps.policy,
      now: deps.now(),
    });
  };
}
