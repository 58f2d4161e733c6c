/**
 * Every NATS subject, KV bucket and stream name the system uses. Services never spell a
 * subject as a string literal; they build it here.
 */

/** Core NATS request-reply subject consumed by the dispatcher queue group. */
export const ROUTE_REQUEST_SUBJECT = "zml.route.request";
/** Queue group shared by every dispatcher replica. */
export const DISPATCHER_QUEUE_GROUP = "zml-dispatchers";
/**
 * Client went away: intake publishes here with the abandoned request's reply inbox in the
 * {@link HEADERS.cancelInbox} header; the dispatcher serving it aborts the node call.
 */
export const ROUTE_CANCEL_SUBJECT = "zml.route.cancel";
/** Prefix of per-node state broadcasts (`zml.node.state.<node>`). */
export const NODE_STATE_PREFIX = "zml.node.state";
/** Prefix of dispatcher outcome observations (`zml.node.observation.<node>`). */
export const NODE_OBSERVATION_PREFIX = "zml.node.observation";
/** A dispatcher cooled a node down; every replica skips it until `until`. */
export const NODE_COOLDOWN_SUBJECT = "zml.node.cooldown";
/** Attestation verification request-reply. */
export const ATTESTATION_VERIFY_SUBJECT = "zml.attestation.verify";

export const KV_BUCKETS = {
  nodes: "zml_nodes",
  models: "zml_models",
  policies: "zml_policies",
  accounts: "zml_accounts",
  /** Registered cloud accounts whose spot prices the cost feed follows (references only). */
  cloudAccounts: "zml_cloud_accounts",
  nodeState: "zml_node_state",
  /** Live health-aggregator replicas, one heartbeat key each; nodes are sharded among them. */
  aggregators: "zml_aggregators",
  /** Provider cost table entries (cloud spot prices, on-prem GPU-hour costs). */
  costs: "zml_costs",
  /** Third-party quality scores per model and node or family. */
  qualityScores: "zml_quality_scores",
  /** Code measurements approved per model and tier (tiers 3–4). */
  measurements: "zml_measurements",
  /**
   * The revocation list. A KV bucket is a JetStream stream, so a watcher that starts late
   * replays the whole list before it serves, then sees each change within milliseconds.
   */
  revocations: "zml_revocations",
} as const;
export type KvBucketName = (typeof KV_BUCKETS)[keyof typeof KV_BUCKETS];

/**
 * Node ids become subject tokens and KV keys, so they are restricted to characters valid in
 * both: letters, digits, `-` and `_`, 1–64 long.
 */
export const NODE_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

export class InvalidSubjectTokenError extends Error {
  readonly code = "invalid_subject_token";
  readonly token: string;
  constructor(token: string) {
    super(`not a valid subject token: ${JSON.stringify(token)}`);
    this.name = "InvalidSubjectTokenError";
    this.token = token;
  }
}

function token(value: string): string {
  if (!NODE_ID_PATTERN.test(value)) throw new InvalidSubjectTokenError(value);
  return value;
}

/** `zml.node.state.<node>`; throws {@link InvalidSubjectTokenError} on a bad node id. */
export function nodeStateSubject(nodeId: string): string {
  return `${NODE_STATE_PREFIX}.${token(nodeId)}`;
}

/** Wildcard for every node's state broadcasts. */
export const NODE_STATE_ALL = `${NODE_STATE_PREFIX}.*`;

/** `zml.node.observation.<node>`; throws {@link InvalidSubjectTokenError} on a bad node id. */
export function nodeObservationSubject(nodeId: string): string {
  return `${NODE_OBSERVATION_PREFIX}.${token(nodeId)}`;
}

/** Wildcard for every node's observations. */
export const NODE_OBSERVATION_ALL = `${NODE_OBSERVATION_PREFIX}.*`;
