import {
  ALL_KV_BUCKETS,
  CONFIG_BUCKETS,
  ATTESTATION_RESULT_ALL,
  ATTESTATION_RESULTS_BUCKET,
  ATTESTATION_VERIFY_SUBJECT,
  BATCH_IDENTITY_PREFIX,
  DISPATCHER_IN_FLIGHT_ALL,
  DISPATCHER_PLACEMENTS_ALL,
  DISPATCHER_ALIVE_SUBJECT,
  JOB_DEAD_PREFIX,
  JOB_RESULT_PREFIX,
  JOB_STATUS_BUCKET,
  JOB_STREAMS,
  JOB_SUBMIT_PREFIX,
  KV_BUCKETS,
  NODE_COOLDOWN_SUBJECT,
  NODE_ID_PATTERN,
  NODE_OBSERVATION_ALL,
  NODE_STATE_ALL,
  ROUTE_CANCEL_SUBJECT,
  ROUTE_REQUEST_SUBJECT,
  SESSION_CREATE_SUBJECT,
  SESSION_DELETE_SUBJECT,
  SESSIONS_BUCKET,
  SERVICE_IDENTITIES,
  SPOT_COST_KEY_PREFIX,
  accountJobsFilter,
  accountResultsFilter,
  inboxPrefixOf,
} from "@zml/contracts";

/**
 * What one bus identity may do: allow-lists of subjects it may publish to and subscribe
 * to. Everything else is denied by nats-server. `allowResponses` lets it answer (once, within
 * a minute) a request it received, without any standing right on the requester's inbox.
 */
export interface BusPermissions {
  publish: string[];
  subscribe: string[];
  allowResponses: boolean;
}

/** A grant is a piece of a permission set; identities are unions of grants. */
type Grant = Partial<Omit<BusPermissions, "allowResponses">>;

const JS_API = "$JS.API";
const kvStream = (bucket: string) => `KV_${bucket}`;

/** JetStream account info: every JetStream client asks for it when it starts. */
const jetStreamClient: Grant = { publish: [`${JS_API}.INFO`] };

/**
 * Reading a KV bucket: bind (stream info), get (direct get, or message get on servers
 * without direct get), and watch/keys (an ordered push consumer delivered to the reader's
 * own inbox, with flow-control replies). No right to create the bucket: a bucket that does
 * not exist yet is created by its writer or by `admin`.
 */
function readKv(bucket: string): Grant {
  const stream = kvStream(bucket);
  return {
    publish: [
      `${JS_API}.STREAM.INFO.${stream}`,
      `${JS_API}.DIRECT.GET.${stream}`,
      `${JS_API}.DIRECT.GET.${stream}.>`,
      `${JS_API}.STREAM.MSG.GET.${stream}`,
      `${JS_API}.CONSUMER.CREATE.${stream}`,
      `${JS_API}.CONSUMER.CREATE.${stream}.>`,
      `${JS_API}.CONSUMER.INFO.${stream}.>`,
      `${JS_API}.CONSUMER.DELETE.${stream}.>`,
      `$JS.FC.${stream}.>`,
    ],
  };
}

/** Writing a KV bucket: put, delete and purge are all publishes to `$KV.<bucket>.<key>`. */
function writeKv(bucket: string): Grant {
  return merge(readKv(bucket), {
    // Create and update: the owner gives its bucket the configured replicas on start.
    publish: [
      `$KV.${bucket}.>`,
      `${JS_API}.STREAM.CREATE.${kvStream(bucket)}`,
      `${JS_API}.STREAM.UPDATE.${kvStream(bucket)}`,
    ],
  });
}

/** Reading single messages of a stream by subject (job status lookups). */
function readStreamMessages(stream: string): Grant {
  return {
    publish: [
      `${JS_API}.STREAM.INFO.${stream}`,
      `${JS_API}.STREAM.MSG.GET.${stream}`,
      `${JS_API}.DIRECT.GET.${stream}`,
      `${JS_API}.DIRECT.GET.${stream}.>`,
    ],
  };
}

/** Pulling from a stream through durable consumers, acking what was done. */
function consumeStream(stream: string): Grant {
  return {
    publish: [
      `${JS_API}.STREAM.INFO.${stream}`,
      `${JS_API}.CONSUMER.CREATE.${stream}`,
      `${JS_API}.CONSUMER.CREATE.${stream}.>`,
      `${JS_API}.CONSUMER.DURABLE.CREATE.${stream}.>`,
      `${JS_API}.CONSUMER.INFO.${stream}.>`,
      `${JS_API}.CONSUMER.MSG.NEXT.${stream}.>`,
      `$JS.ACK.${stream}.>`,
    ],
  };
}

/**
 * Creating streams that do not exist yet (a look first, then the create) and giving existing
 * ones the configured replicas (update).
 */
const createStreams = (...streams: string[]): Grant => ({
  publish: streams.flatMap((s) => [
    `${JS_API}.STREAM.INFO.${s}`,
    `${JS_API}.STREAM.CREATE.${s}`,
    `${JS_API}.STREAM.UPDATE.${s}`,
  ]),
});

/** The identity's private inbox: only it may subscribe there. */
const ownInbox = (identity: string): Grant => ({ subscribe: [`${inboxPrefixOf(identity)}.>`] });

function merge(...grants: Grant[]): Required<Grant> {
  const publish = new Set<string>();
  const subscribe = new Set<string>();
  for (const g of grants) {
    for (const s of g.publish ?? []) publish.add(s);
    for (const s of g.subscribe ?? []) subscribe.add(s);
  }
  return { publish: [...publish].sort(), subscribe: [...subscribe].sort() };
}

const ALL_STREAMS = Object.values(JOB_STREAMS);

type GrantSet = { grants: Grant[]; allowResponses?: boolean };

/**
 * The permission table. Each entry is what that service's job needs, and nothing more;
 * `docs/security.md` explains each line and what a stolen credential still allows.
 */
const SERVICE_GRANTS: Record<(typeof SERVICE_IDENTITIES)[number], GrantSet> = {
  intake: {
    grants: [
      jetStreamClient,
      ownInbox("intake"),
      {
        publish: [
          ROUTE_REQUEST_SUBJECT,
          ROUTE_CANCEL_SUBJECT,
          SESSION_CREATE_SUBJECT,
          SESSION_DELETE_SUBJECT,
          ATTESTATION_VERIFY_SUBJECT,
          `${JOB_SUBMIT_PREFIX}.>`,
        ],
        // Dispatcher liveness beats: a request on a dead dispatcher ends in about a second.
        subscribe: [DISPATCHER_ALIVE_SUBJECT],
      },
      readKv(KV_BUCKETS.accounts),
      readKv(KV_BUCKETS.models),
      readKv(KV_BUCKETS.policies),
      readKv(JOB_STATUS_BUCKET),
      // The published tier 3–4 allowlist: nodes, their attestation results, revocations.
      readKv(KV_BUCKETS.nodes),
      readKv(ATTESTATION_RESULTS_BUCKET),
      readKv(KV_BUCKETS.revocations),
      readStreamMessages(JOB_STREAMS.jobs),
      readStreamMessages(JOB_STREAMS.results),
      // Checking that the batch streams exist before queueing a job (it creates none).
      { publish: [`${JS_API}.STREAM.INFO.${JOB_STREAMS.dead}`] },
    ],
  },
  dispatcher: {
    grants: [
      jetStreamClient,
      ownInbox("dispatcher"),
      {
        subscribe: [
          ROUTE_REQUEST_SUBJECT,
          ROUTE_CANCEL_SUBJECT,
          SESSION_CREATE_SUBJECT,
          SESSION_DELETE_SUBJECT,
          NODE_COOLDOWN_SUBJECT,
          // Replicas share their per-node in-flight counts and prefix placements with each
          // other only.
          DISPATCHER_IN_FLIGHT_ALL,
          DISPATCHER_PLACEMENTS_ALL,
          // The aggregator's state broadcast, beside the node-state bucket's watch.
          NODE_STATE_ALL,
          // The replicas' liveness beats: a batch job held by a live replica is not run twice.
          DISPATCHER_ALIVE_SUBJECT,
        ],
        // Route and session replies go to intake's inbox, and nowhere else.
        publish: [
          `${inboxPrefixOf("intake")}.>`,
          DISPATCHER_IN_FLIGHT_ALL,
          DISPATCHER_PLACEMENTS_ALL,
          NODE_OBSERVATION_ALL,
          NODE_COOLDOWN_SUBJECT,
          ATTESTATION_VERIFY_SUBJECT,
          `${JOB_RESULT_PREFIX}.>`,
          `${JOB_DEAD_PREFIX}.>`,
          DISPATCHER_ALIVE_SUBJECT,
        ],
      },
      ...[
        KV_BUCKETS.nodes,
        KV_BUCKETS.models,
        KV_BUCKETS.policies,
        KV_BUCKETS.costs,
        KV_BUCKETS.qualityScores,
        KV_BUCKETS.nodeState,
        KV_BUCKETS.accounts,
        KV_BUCKETS.revocations,
        ATTESTATION_RESULTS_BUCKET,
      ].map(readKv),
      writeKv(SESSIONS_BUCKET),
      writeKv(JOB_STATUS_BUCKET),
      consumeStream(JOB_STREAMS.jobs),
      readStreamMessages(JOB_STREAMS.results),
      readStreamMessages(JOB_STREAMS.dead),
      createStreams(...ALL_STREAMS),
    ],
  },
  "health-aggregator": {
    grants: [
      jetStreamClient,
      ownInbox("health-aggregator"),
      { subscribe: [NODE_OBSERVATION_ALL], publish: [NODE_STATE_ALL] },
      readKv(KV_BUCKETS.nodes),
      writeKv(KV_BUCKETS.nodeState),
      writeKv(KV_BUCKETS.aggregators),
      // The spot-price feed: reads the cloud accounts, writes only the cost-table keys it
      // owns (`spot.<account>.<node>`); the operator's own cost entries stay out of reach.
      readKv(KV_BUCKETS.cloudAccounts),
      readKv(KV_BUCKETS.costs),
      { publish: [`$KV.${KV_BUCKETS.costs}.${SPOT_COST_KEY_PREFIX}.>`] },
    ],
  },
  attestation: {
    // Verify replies go back through allow_responses: no standing right on any inbox.
    allowResponses: true,
    grants: [
      jetStreamClient,
      ownInbox("attestation"),
      { subscribe: [ATTESTATION_VERIFY_SUBJECT], publish: [ATTESTATION_RESULT_ALL] },
      readKv(KV_BUCKETS.nodes),
      readKv(KV_BUCKETS.measurements),
      readKv(KV_BUCKETS.revocations),
      writeKv(ATTESTATION_RESULTS_BUCKET),
    ],
  },
  admin: {
    grants: [
      jetStreamClient,
      ownInbox("admin"),
      ...CONFIG_BUCKETS.map(writeKv),
      // `zml get` shows live state next to the configuration; creating every bucket up front
      // means no reader ever depends on a writer having started first.
      ...ALL_KV_BUCKETS.map(readKv),
      {
        publish: ALL_KV_BUCKETS.flatMap((b) => [
          `${JS_API}.STREAM.CREATE.${kvStream(b)}`,
          `${JS_API}.STREAM.UPDATE.${kvStream(b)}`,
        ]),
      },
      createStreams(...ALL_STREAMS),
    ],
  },
};

/**
 * A batch producer queues jobs for its account and reads back that account's results. The
 * only read JetStream lets permissions confine to subjects is the direct get with the subject
 * in the API subject (`$JS.API.DIRECT.GET.<stream>.<subject>`: the last message on it; the
 * server refuses a request body there). Message get, the body form of direct get and
 * consumers name no subject a permission could check, and stream info lists every account's
 * subjects (`subjects_filter`): each would show other accounts' jobs or results, so a
 * producer has none of them, not even on the jobs stream.
 */
function batchGrants(account: string): GrantSet {
  return {
    grants: [
      jetStreamClient,
      ownInbox(`${BATCH_IDENTITY_PREFIX}${account}`),
      {
        publish: [
          accountJobsFilter(account),
          `${JS_API}.DIRECT.GET.${JOB_STREAMS.results}.${accountResultsFilter(account)}`,
        ],
      },
    ],
  };
}

export class UnknownIdentityError extends Error {
  readonly code = "unknown_identity";
  readonly identity: string;
  constructor(identity: string) {
    super(
      `unknown bus identity '${identity}': one of ${SERVICE_IDENTITIES.join(", ")}, or ${BATCH_IDENTITY_PREFIX}<account>`,
    );
    this.name = "UnknownIdentityError";
    this.identity = identity;
  }
}

/**
 * The permissions of a bus identity: a service identity, or `batch-<account>` for a batch
 * producer. Pure; throws {@link UnknownIdentityError} for anything else.
 */
export function permissionsFor(identity: string): BusPermissions {
  let set: GrantSet | undefined;
  if ((SERVICE_IDENTITIES as readonly string[]).includes(identity)) {
    set = SERVICE_GRANTS[identity as (typeof SERVICE_IDENTITIES)[number]];
  } else if (identity.startsWith(BATCH_IDENTITY_PREFIX)) {
    const account = identity.slice(BATCH_IDENTITY_PREFIX.length);
    if (NODE_ID_PATTERN.test(account)) set = batchGrants(account);
  }
  if (!set) throw new UnknownIdentityError(identity);
  return { ...merge(...set.grants), allowResponses: set.allowResponses ?? false };
}
