import { requestJson } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { ATTESTATION_VERIFY_ENDPOINT, NODE_ID_PATTERN, ZmlError } from "@zml/contracts";
import type { AttestationResult } from "@zml/contracts";
import { reportDataFor } from "@zml/tdx";
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { ZodOpenApiPathsObject } from "zod-openapi";
import { admit } from "../admission/admit.ts";
import type { Authenticator } from "../admission/auth.ts";
import { createRateLimiter } from "../admission/rate-limit.ts";
import type { RateLimiter } from "../admission/rate-limit.ts";
import { AnyObjectSchema, API_KEY, json } from "./docs.ts";

/** A new attestation waits for the node's quote (up to 5 s in the attestation service). */
const VERIFY_TIMEOUT_MS = 15_000;
const NONCE = /^[0-9a-fA-F]{64}$/;

export interface AttestationRouteDeps {
  bus: Bus;
  auth: Authenticator;
  rateLimiter: RateLimiter;
  clock: () => number;
  config: { ZML_ATTESTATION_NONCE_PER_MINUTE: number };
}

/** `GET /v1/attestation/{node_id}`: everything needed to verify the node with Intel DCAP tooling. */
export interface AttestationView {
  object: "attestation";
  node_id: string;
  tier: number;
  /** The raw TDX quote, base64. */
  quote_b64: string | null;
  nonce_hex: string | null;
  /**
   * SHA-256 of the SPKI DER of the TLS key the node presented to the attestation service
   * (and every dispatcher pins); null when the quote did not bind one.
   */
  tls_key_sha256: string | null;
  /**
   * The REPORTDATA the quote must carry (`reportDataFor` of `@zml/tdx`): the nonce, then
   * SHA-256 of the layout's domain, the TLS key hash and 32 zero bytes (no session key).
   */
  expected_report_data: string | null;
  verification: Pick<AttestationResult, "ok" | "reason_code" | "reason" | "checks"> &
    Pick<AttestationResult, "tcb_status" | "advisory_ids" | "revocation">;
  measurement: AttestationResult["measurement"];
  /** Epoch ms. */
  verified_at: number;
  expires_at: number;
}

/**
 * Independent verification of a tier 3/4 node. Without `nonce`, the attestation service's
 * current result (attested with its own nonce, refreshed in the background); with
 * `?nonce=<64 hex>`, a fresh quote from the node bound to the caller's nonce, so the
 * caller knows it is not a replay. Every node that is not a tier 3/4 node, unknown or not,
 * gets the same 404 `not_found`.
 */
export function attestationRoutes(deps: AttestationRouteDeps) {
  // A fresh nonce costs the node a quote and the service a full verification: rationed per
  // account, apart from the account's own request limit.
  const nonceLimit = { requests_per_minute: deps.config.ZML_ATTESTATION_NONCE_PER_MINUTE };
  const nonceLimiter = createRateLimiter();
  return (app: FastifyInstance) => {
    app.get<{ Params: { node_id: string }; Querystring: { nonce?: string } }>(
      "/v1/attestation/:node_id",
      async (req): Promise<AttestationView> => {
        const account = admit(deps, req.headers.authorization, deps.clock());
        const nodeId = req.params.node_id;
        const nonce = req.query.nonce;
        if (nonce !== undefined && (typeof nonce !== "string" || !NONCE.test(nonce))) {
          throw new ZmlError("invalid_request", "nonce must be 32 bytes of hex", {
            param: "nonce",
          });
        }
        if (!NODE_ID_PATTERN.test(nodeId)) throw notOnAllowlist();
        if (nonce !== undefined) {
          const decision = nonceLimiter.take(account.id, nonceLimit, deps.clock());
          if (!decision.ok) {
            const message = `at most ${nonceLimit.requests_per_minute} fresh-nonce attestations a minute per account`;
            throw new ZmlError("rate_limited", message, {
              param: "nonce",
              retryAfterS: decision.retryAfterS,
            });
          }
        }
        const reply = await requestJson(
          deps.bus,
          ATTESTATION_VERIFY_ENDPOINT,
          {
            type: "attestation.verify.v1",
            node_id: nodeId,
            ...(nonce === undefined ? {} : { nonce: nonce.toLowerCase() }),
          },
          { timeoutMs: VERIFY_TIMEOUT_MS, service: "the attestation service" },
        );
        if ("error" in reply) {
          switch (reply.error.code) {
            // One answer for both: the allowlist is public, the rest of the fleet is not.
            case "unknown_node":
            case "not_tee_node":
              throw notOnAllowlist();
            case "invalid_request":
              throw new ZmlError("invalid_request", reply.error.message);
            default:
              throw new ZmlError("bus_unavailable", reply.error.message, { retryAfterS: 1 });
          }
        }
        return present(reply.result);
      },
    );
  };
}

/**
 * The one answer for every node that is not a tier 3/4 node, whether it exists (tier 1 or 2)
 * or not: the same status, code and message (not even the id is echoed), so the endpoint tells nobody which tier-1 and
 * tier-2 nodes exist (the allowlist of tier 3/4 nodes is public by design; the rest is not).
 */
const NOT_ON_ALLOWLIST = "no tier 3/4 node of that id is on the allowlist";

function notOnAllowlist(): ZmlError {
  return new ZmlError("not_found", NOT_ON_ALLOWLIST, { param: "node_id" });
}

function present(r: AttestationResult): AttestationView {
  return {
    object: "attestation",
    node_id: r.node_id,
    tier: r.tier,
    quote_b64: r.quote_b64,
    nonce_hex: r.nonce_hex,
    tls_key_sha256: r.tls_key_sha256,
    expected_report_data:
      r.nonce_hex === null || r.tls_key_sha256 === null
        ? null
        : reportDataFor({ nonce: r.nonce_hex, tlsKeySha256: r.tls_key_sha256 }),
    verification: {
      ok: r.ok,
      reason_code: r.reason_code,
      reason: r.reason,
      checks: r.checks,
      tcb_status: r.tcb_status,
      advisory_ids: r.advisory_ids,
      revocation: r.revocation,
    },
    measurement: r.measurement,
    verified_at: r.verified_at,
    expires_at: r.expires_at,
  };
}

/** The attestation check in the OpenAPI document. */
export const attestationPaths: ZodOpenApiPathsObject = {
  "/v1/attestation/{node_id}": {
    get: {
      operationId: "getAttestation",
      tags: ["trust"],
      summary: "A tier 3/4 node's raw TDX quote and verification, for independent checks",
      description:
        "The quote is base64, verifiable with Intel DCAP tooling. Every node that is not a " +
        "tier 3/4 node, whether it exists or not, gets the same 404 `not_found`, byte for byte.",
      security: API_KEY,
      requestParams: {
        path: z.object({ node_id: z.string().meta({ description: "A tier 3 or 4 node" }) }),
        query: z.object({
          nonce: z
            .string()
            .regex(NONCE)
            .optional()
            .meta({ description: "32 bytes of hex to bind into a fresh quote" }),
        }),
      },
      responses: {
        "200": {
          description: "Quote, verification, measurement, expiry",
          content: json(AnyObjectSchema),
        },
      },
    },
  },
};
