// One attestation of one node: fetch a quote for a nonce, then judge it. Fails closed: every
// error becomes an `ok: false` result with a reason.
import { ATTESTATION_FAILURES } from "@zml/contracts";
import type {
  ApprovedMeasurement,
  AttestationResult,
  NodeQuoteResponse,
  Revocation,
} from "@zml/contracts";
import { evaluateQuote, failedResult } from "./evaluate.ts";
import type { TeeNode, TrustPolicy } from "./evaluate.ts";
import type { QuoteRequestOptions } from "./quote-fetch.ts";

export interface AttestorDeps {
  fetchQuote(
    node: TeeNode,
    nonceHex: string,
    options: QuoteRequestOptions,
  ): Promise<NodeQuoteResponse>;
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
    let quote: NodeQuoteResponse;
    try {
      quote = await deps.fetchQuote(node, nonceHex, options);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      return failedResult(
        node,
        deps.now(),
        ATTESTATION_FAILURES.quoteUnavailable,
        reason,
        nonceHex,
      );
    }
    // Revocations and approvals are read after the fetch, so a change that landed while the
    // quote was on its way is already applied.
    return evaluateQuote({
      node,
      quote,
      nonceHex,
      sessionKey: options.sessionKey === true,
      approved: deps.approved(),
      revocations: deps.revocations(),
      policy: deps.policy,
      now: deps.now(),
    });
  };
}
