import { NODE_QUOTE_PATH } from "@zml/contracts";
import { get as createHttpGet } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import { get as httpsGet } from "node:https";
import type { FaultSlot } from "./fault-slot.ts";
import { methodNotAllowed, notFound, sendJson } from "./http-reply.ts";
import { nonceOf, wantsSessionKey } from "./tee.ts";
import type { TeeQuoter } from "./tee.ts";
import type { TlsIdentity } from "./tls-identity.ts";

/**
 * `GET /attestation/quote?nonce=…`: a TEE node's quote binding the nonce and the TD's TLS key
 * (`tdIdentity`, the key made inside the TD, even after a key swap); 404 on other nodes.
 */
export function createQuoteRoute(
  faults: FaultSlot,
  quoter: TeeQuoter | undefined,
  tdIdentity: TlsIdentity | undefined,
): (req: IncomingMessage, res: ServerResponse) => void {
  return function handleQuote(req, res) {
    if (req.method !== "GET") return methodNotAllowed(res);
    const fault = faults.take("quote");
    if (fault?.kind === "relay") return relayQuote(req, res, fault.target);
    if (quoter === undefined || tdIdentity === undefined) return notFound(res);
    const nonce = nonceOf(req.url ?? "/");
    if (nonce === undefined) {
      const body = {
        error: {
          message: "nonce: expected 32 bytes of hex",
          type: "invalid_request_error",
          param: "nonce",
          code: "invalid_nonce",
        },
      };
      return sendJson(res, 400, JSON.stringify(body));
    }
    const answer = quoter.quote(nonce, {
      tlsKeySha256: tdIdentity.keySha256,
      sessionKey: wantsSessionKey(req.url ?? "/"),
    });
    sendJson(res, 200, JSON.stringify(answer), { "cache-control": "no-store" });
  };
}

/** The `relay` fault: the target's answer to the same quote request, passed off as ours. */
function relayQuote(req: IncomingMessage, res: ServerResponse, target: string): void {
  const url = new URL(req.url ?? "/", target.replace(/\/+$/, "") + "/");
  url.pathname = new URL(target).pathname.replace(/\/+$/, "") + NODE_QUOTE_PATH;
  const onAnswer = (upstream: IncomingMessage) => {
    const chunks: Buffer[] = [];
    upstream.on("data", (chunk: Buffer) => chunks.push(chunk));
    upstream.on("end", () =>
      sendJson(res, upstream.statusCode ?? 502, Buffer.concat(chunks).toString("utf8")),
    );
    upstream.on("error", () => res.destroy());
  };
  // The relay takes any certificate: it is the attacker here, not the verifier.
  const request =
    url.protocol === "https:"
      ? httpsGet(url, { rejectUnauthorized: false }, onAnswer)
      : createHttpGet(url, onAnswer);
  request.on("error", () => sendJson(res, 502, '{"detail":"relay target unreachable"}'));
}
