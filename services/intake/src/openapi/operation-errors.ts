// Which errors each operation of the intake API can answer, as error codes: the one table
// the OpenAPI document is built from (its statuses come from each code's own status in
// ERROR_CODES, the mapping `sendError` answers with), and which the live test of
// /openapi.json holds the running intake to. A route that learns a new failure adds its
// code here, and the document follows.
import { ERROR_CODES } from "@zml/contracts";
import type { ErrorCode } from "@zml/contracts";
import { ADMIN_RESOURCES, pascal } from "../admin/resources.ts";
import type { AdminResource } from "../admin/resources.ts";

/** What one operation can answer besides its success. */
export interface OperationErrors {
  /** Every code it can answer with (in the error envelope). */
  codes: readonly ErrorCode[];
  /**
   * The node's own 4xx (400, 402, 404, 409, 422, 429…) goes back as the node sent it, status
   * and body: the inference calls relay them without retry.
   */
  relaysNodeClientErrors: boolean;
}

/**
 * Every request under `/v1/` and `/admin/` (plugins/admission-hooks.ts): an address that failed
 * authentication too often (429), a replica that is stopping (503), and the error handler's
 * last resort for what nothing else names (500).
 */
const ADMISSION: readonly ErrorCode[] = ["auth_throttled", "shutting_down", "internal_error"];

/**
 * A request with a body (POST, PUT and DELETE; fastify ignores a GET's): too large (413),
 * too slow (408, admission/body-deadline.ts), an unreadable content type (415) or a length that is not
 * the body's (400); http/errors.ts names each.
 */
const BODY: readonly ErrorCode[] = [
  "payload_too_large",
  "request_timeout",
  "unsupported_media_type",
  "invalid_request",
];

/** A path with a parameter: a malformed percent-encoding in it (400). */
const PATH: readonly ErrorCode[] = ["invalid_request"];

/** An API key checked against the in-memory accounts (admission/auth.ts). */
const API_KEY: readonly ErrorCode[] = ["unauthorized", "key_store_unavailable"];

/** An API key, then one token of the account's rate limit (admission/admit.ts). */
const ADMITTED: readonly ErrorCode[] = [...API_KEY, "rate_limited"];

/** A JSON object body checked against its schema (request/validation.ts). */
const JSON_BODY: readonly ErrorCode[] = ["invalid_json", "invalid_request", "duplicate_field"];

/** A request planned from memory (request/route-plan.ts, request/policy.ts). */
const PLANNED: readonly ErrorCode[] = ["unknown_model", "tier_not_allowed", "unknown_policy"];

/** A request-reply over the bus (requestJson): nobody there, or no answer in time. */
const BUS_REQUEST: readonly ErrorCode[] = ["bus_unavailable", "gateway_timeout"];

/**
 * A routed request (relay/relay.ts): intake's bus and its dispatchers, then whatever the
 * dispatcher that took it answers before the first byte.
 */
const ROUTED: readonly ErrorCode[] = [
  "bus_unavailable",
  // The body would not fit one bus message (a server whose max_payload is below the limit).
  "payload_too_large",
  "dispatcher_lost",
  "gateway_timeout",
  "api_not_served",
  "no_node_available",
  "no_usable_node",
  "saturated",
  "upstream_unavailable",
  "upstream_timeout",
  "upstream_auth_failed",
  "bad_upstream_response",
  "response_too_large",
  "stream_interrupted",
];

/**
 * A request that may be sealed to a tier-4 session: refused in clear, checked against its
 * session by the dispatcher, and answered in clear by the TD proxy when it cannot open it.
 */
const SEALED: readonly ErrorCode[] = [
  "sealed_body_required",
  "sealed_key_mismatch",
  "session_not_found",
  "session_expired",
  "session_node_unavailable",
  "sealed_request_invalid",
  "sealed_request_rejected",
  "sealed_request_replayed",
];

const inference = (sealable: boolean): OperationErrors => ({
  codes: [
    ...ADMISSION,
    ...BODY,
    ...ADMITTED,
    ...JSON_BODY,
    ...PLANNED,
    ...ROUTED,
    ...(sealable ? SEALED : ["sealed_body_required" as const]),
  ],
  relaysNodeClientErrors: true,
});

const plain = (...groups: ReadonlyArray<readonly ErrorCode[]>): OperationErrors => ({
  codes: groups.flat(),
  relaysNodeClientErrors: false,
});

/** The admin credential (routes/admin.ts) and the configuration store in KV (503). */
const ADMIN: readonly ErrorCode[] = ["unauthorized", "bus_unavailable"];

function adminOperations(resources: readonly AdminResource[]): Record<string, OperationErrors> {
  const ops: Record<string, OperationErrors> = {};
  for (const r of resources) {
    const name = pascal(r.kind);
    ops[`adminList${name}`] = plain(ADMISSION, ADMIN);
    // A key that is not one of the kind's keys is 400 naming `key`.
    ops[`adminGet${name}`] = plain(ADMISSION, PATH, ADMIN, ["invalid_request", "not_found"]);
    ops[`adminPut${name}`] = plain(ADMISSION, PATH, BODY, ADMIN, JSON_BODY, r.answers ?? []);
    ops[`adminDelete${name}`] = plain(ADMISSION, PATH, BODY, ADMIN, [
      "invalid_request",
      "not_found",
    ]);
  }
  // `internal_error` also when the account kept changing under five compare-and-set tries.
  ops.adminIssueAccountKey = plain(ADMISSION, PATH, BODY, ADMIN, ["invalid_request", "not_found"]);
  return ops;
}

/** Every operation of the document, by its `operationId`. */
export const OPERATION_ERRORS: Readonly<Record<string, OperationErrors>> = {
  createChatCompletion: inference(true),
  createCompletion: inference(true),
  createResponse: inference(true),
  createEmbedding: inference(true),
  // `/v1/infer` rewrites its body, so it takes no sealed one (400 naming content-type).
  infer: inference(false),
  listModels: plain(ADMISSION, API_KEY),
  retrieveModel: plain(ADMISSION, PATH, API_KEY, ["unknown_model"]),
  // The dispatchers pick and attest a node: no node may be usable or free (503).
  createSession: plain(ADMISSION, BODY, ADMITTED, JSON_BODY, PLANNED, BUS_REQUEST, [
    "no_node_available",
    "no_usable_node",
    "saturated",
  ]),
  deleteSession: plain(ADMISSION, PATH, BODY, ADMITTED, BUS_REQUEST, ["session_not_found"]),
  // Public, but under `/v1/`: the authentication throttle and a stopping replica apply.
  getAllowlist: plain(ADMISSION),
  // A bad nonce (400), an unknown or non-TEE node (404), fresh nonces rationed (429).
  getAttestation: plain(ADMISSION, PATH, ADMITTED, BUS_REQUEST, ["invalid_request", "not_found"]),
  // JetStream away or between leaders is 503 `bus_unavailable`, after the submission's tries.
  createJob: plain(ADMISSION, BODY, ADMITTED, JSON_BODY, PLANNED, [
    "sealed_body_required",
    "bus_unavailable",
  ]),
  getJob: plain(ADMISSION, PATH, ADMITTED, ["not_found", "bus_unavailable"]),
  ...adminOperations(ADMIN_RESOURCES),
};

/**
 * The operation's error statuses, each with its codes, in status order: what `/openapi.json`
 * documents for it.
 */
export function errorStatusesOf(errors: OperationErrors): Array<[number, ErrorCode[]]> {
  const byStatus = new Map<number, Set<ErrorCode>>();
  for (const code of errors.codes) {
    const { status } = ERROR_CODES[code];
    byStatus.set(status, (byStatus.get(status) ?? new Set()).add(code));
  }
  return [...byStatus]
    .sort(([a], [b]) => a - b)
    .map(([status, codes]) => [status, [...codes].sort()]);
}
