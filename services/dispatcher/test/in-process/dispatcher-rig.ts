// The in-process test tier: a real nats-server (libs/harness), simulated nodes on real
// sockets (libs/node-sim), the configuration in real KV buckets, and the dispatcher started
// in this process with `startDispatcher`. Requests go over the bus exactly as intake sends
// them: a `route.request` with routing headers, answered as reply frames.
import { createHeaders, createReplyMux, errorOfFrame, openKv, publishBytes } from "@zml/bus";
import type { Bus, PendingReply, ReplyMux, RouteFrame } from "@zml/bus";
import { startBusRig } from "@zml/bus/testing";
import {
  ATTESTATION_RESULTS_BUCKET,
  HEADERS,
  KV_BUCKETS,
  SESSIONS_BUCKET,
  MESSAGE_TYPES,
  ROUTE_CANCEL_SUBJECT,
  ROUTE_REQUEST_SUBJECT,
  parseRoutingHeader,
} from "@zml/contracts";
import type {
  AttestationResult,
  ModelSpec,
  NodeSpec,
  NodeState,
  PolicySpec,
  RoutingInfo,
  Session,
} from "@zml/contracts";
import { activeNodeState, attestationResult, nodeSpec } from "@zml/contracts/testing";
import { startSimNode } from "@zml/node-sim";
import type { SimNode, SimNodeOptions, SimTeeSigner } from "@zml/node-sim";
import { createTestTee, TEST_MRTD } from "@zml/tdx/testing";
import type { HostResolver } from "@zml/runtime";
import { createLogger, Registry } from "@zml/telemetry";
import { startDispatcher } from "../../src/app.ts";
import type { Dispatcher } from "../../src/app.ts";
import { loadConfig } from "../../src/config.ts";

export const MODEL = "m-main";
export const FALLBACK_MODEL = "m-fallback";

export interface RigNode {
  id: string;
  family: string;
  models?: string[];
  maxConcurrency?: number;
  /**
   * Default 1. A tier 3/4 node runs in TEE mode (TLS with a key made inside its "TD") and
   * gets a usable attestation result for its endpoint and key, as the attestation service
   * would publish it (attestation itself is tested in services/attestation); the dispatcher
   * pins that key on every connection.
   */
  tier?: 1 | 2 | 3 | 4;
  /** Throughput the health aggregator would have measured (`tokens_per_second`). */
  tokensPerSecond?: number | null;
  /**
   * The host name its endpoint names instead of the sim's 127.0.0.1 (the port stays), for
   * a name the rig's `resolveHost` answers.
   */
  host?: string;
  sim?: Partial<Omit<SimNodeOptions, "nodeId" | "models" | "flavour">>;
}

export interface RigOptions {
  nodes: RigNode[];
  policies?: PolicySpec[];
  models?: ModelSpec[];
  /** Extra dispatcher environment, e.g. a short cooldown. */
  env?: Record<string, string>;
  /** Tier-4 sessions to seed, as a dispatcher that opened them would have written them. */
  sessions?: Session[];
  /** Resolves node host names for the dispatcher (see `RigNode.host`). */
  resolveHost?: HostResolver;
}

export interface RouteAnswer {
  frames: RouteFrame[];
  /** The upstream status of a relayed answer; undefined for an error frame. */
  status: number | undefined;
  routing: RoutingInfo | undefined;
  text: string;
  /** The error of an `error` frame (the last frame). */
  error: { code: string; message: string; param: string | null } | undefined;
}

export interface SendOptions {
  model?: string;
  stream?: boolean;
  policy?: string;
  fallbackModels?: string[];
  acceleratorHint?: string;
  maxTokens?: number;
  deadlineMs?: number;
  tier?: number;
  sessionId?: string;
  /** A sealed request's key id (the body stays the plain one: the rig's nodes are plain). */
  sealedKeyId?: string;
  body?: Record<string, unknown>;
  /** Receives the pending request as soon as it is sent (to cancel it). */
  onSent?: (pending: PendingReply) => void;
}

export interface Rig {
  bus: Bus;
  sims: Map<string, SimNode>;
  dispatcher: Dispatcher;
  send(options?: SendOptions): Promise<RouteAnswer>;
  /** Publishes `route.cancel` for a request, as intake does when its client goes away. */
  cancel(pending: PendingReply): void;
  /** Node calls every sim received, by node id. */
  payloads(): Record<string, number>;
  /** The dispatcher's metrics, as `/metrics` shows them. */
  metrics(): Promise<string>;
  stop(): Promise<void>;
}

export async function startRig(options: RigOptions): Promise<Rig> {
  // The harness identity: this tier drives the dispatcher's code, not the bus permissions
  // (the e2e stacks run each service on its own identity).
  const busRig = await startBusRig({ name: "dispatcher-rig" });
  const { bus, nats } = busRig;
  const sims = new Map<string, SimNode>();
  let dispatcher: Dispatcher | undefined;
  let mux: ReplyMux | undefined;
  const stop = async () => {
    mux?.close();
    await dispatcher?.stop({ deadline: Date.now() + 5_000 });
    await Promise.allSettled([...sims.values()].map((s) => s.close()));
    await busRig.stop();
  };
  try {
    const now = Date.now();
    const nodes = await openKv(bus, KV_BUCKETS.nodes);
    const states = await openKv(bus, KV_BUCKETS.nodeState);
    const attestations = await openKv(bus, ATTESTATION_RESULTS_BUCKET);
    for (const [i, n] of options.nodes.entries()) {
      const models = n.models ?? [MODEL];
      const tee = (n.tier ?? 1) >= 3 ? { tee: { signer: teeSigner(), mrtd: TEST_MRTD } } : {};
      const sim = await startSimNode({ nodeId: n.id, flavour: "vllm", models, ...tee, ...n.sim });
      sims.set(n.id, sim);
      const spec = nodeSpec(n.id, {
        endpoint: n.host === undefined ? sim.url : withHost(sim.url, n.host),
        accelerator_family: n.family,
        tier: n.tier ?? 1,
        models,
        max_concurrency: n.maxConcurrency ?? 16,
        registered_at: i,
      });
      await nodes.put(n.id, JSON.stringify(spec));
      await states.put(n.id, JSON.stringify(activeState(n, sim.instanceId, now)));
      if ((n.tier ?? 1) >= 3) {
        const key = sim.stats().tls_key_sha256 ?? null;
        await attestations.put(n.id, JSON.stringify(attested(spec, key, now)));
      }
    }
    const sessions = await openKv(bus, SESSIONS_BUCKET);
    for (const s of options.sessions ?? []) await sessions.put(s.session_id, JSON.stringify(s));
    const models = await openKv(bus, KV_BUCKETS.models);
    for (const m of options.models ?? [{ id: MODEL }, { id: FALLBACK_MODEL }]) {
      await models.put(m.id, JSON.stringify(m));
    }
    const policies = await openKv(bus, KV_BUCKETS.policies);
    for (const p of options.policies ?? []) await policies.put(p.name, JSON.stringify(p));

    const registry = new Registry();
    dispatcher = await startDispatcher({
      bus,
      config: loadConfig({
        ...nats.serviceEnv("dispatcher"),
        BATCH_ENABLED: "false",
        // The sims listen on 127.0.0.1, as in the dev stack.
        ZML_NODE_ALLOW_LOOPBACK: "true",
        ...options.env,
      }),
      log: createLogger({
        service: "dispatcher-test",
        level: "silent",
      }),
      registry,
      secrets: new Map(),
      clock: Date.now,
      random: Math.random,
      randomHex: (bytes) => "ab".repeat(bytes),
      replica: "rig-dispatcher",
      ...(options.resolveHost ? { resolveHost: options.resolveHost } : {}),
    });
    mux = createReplyMux(bus);
    const client = mux;
    return {
      bus,
      sims,
      dispatcher,
      send: (o = {}) => send(client, o),
      cancel: (pending) => {
        const h = createHeaders();
        h.set(HEADERS.cancelInbox, pending.inbox);
        publishBytes(bus, ROUTE_CANCEL_SUBJECT, new Uint8Array(0), h);
      },
      payloads: () =>
        Object.fromEntries([...sims].map(([id, sim]) => [id, sim.stats().payloads_received])),
      metrics: () => registry.metrics(),
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** The URL with another host name (the port and path stay). */
function withHost(url: string, host: string): string {
  const u = new URL(url);
  u.hostname = host;
  return u.href;
}

export function activeState(n: RigNode, instanceId: string, now: number): NodeState {
  return activeNodeState(n.id, now, {
    tokens_per_second: n.tokensPerSecond ?? null,
    instance_id: instanceId,
  });
}

let signer: SimTeeSigner | undefined;
/** One test PKI per test file: the PCK that signs the TEE sims' quotes. */
function teeSigner(): SimTeeSigner {
  signer ??= createTestTee().signer;
  return signer;
}

/**
 * A passed attestation of the node at its endpoint with its TLS key, valid for an hour,
 * approved for all its models.
 */
function attested(spec: NodeSpec, tlsKeySha256: string | null, now: number): AttestationResult {
  return attestationResult({
    node_id: spec.id,
    tier: spec.tier as 3 | 4,
    approved_models: spec.models,
    verified_at: now,
    expires_at: now + 3_600_000,
    endpoint: spec.endpoint,
    tls_key_sha256: tlsKeySha256,
  });
}

function send(mux: ReplyMux, o: SendOptions): Promise<RouteAnswer> {
  const model = o.model ?? MODEL;
  const h = createHeaders();
  h.set(HEADERS.type, MESSAGE_TYPES.routeRequestV1);
  h.set(HEADERS.requestId, `req-${Math.random().toString(36).slice(2)}`);
  h.set(HEADERS.model, model);
  h.set(HEADERS.path, "/v1/chat/completions");
  h.set(HEADERS.stream, o.stream ? "1" : "0");
  h.set(HEADERS.tier, String(o.tier ?? 1));
  if (o.sessionId) h.set(HEADERS.sessionId, o.sessionId);
  if (o.sealedKeyId) h.set(HEADERS.sealedKeyId, o.sealedKeyId);
  h.set(HEADERS.account, "acct");
  h.set(HEADERS.deadline, String(Date.now() + (o.deadlineMs ?? 20_000)));
  if (o.policy) h.set(HEADERS.policy, o.policy);
  if (o.fallbackModels) h.set(HEADERS.fallbackModels, o.fallbackModels.join(","));
  if (o.acceleratorHint) h.set(HEADERS.acceleratorHint, o.acceleratorHint);
  if (o.maxTokens !== undefined) h.set(HEADERS.maxTokens, String(o.maxTokens));
  const body = JSON.stringify({
    model,
    messages: [{ role: "user", content: "hello" }],
    ...(o.stream ? { stream: true } : {}),
    ...o.body,
  });
  return new Promise((resolve) => {
    const frames: RouteFrame[] = [];
    const pending = mux.request(
      ROUTE_REQUEST_SUBJECT,
      new TextEncoder().encode(body),
      h,
      (frame) => {
        frames.push(frame);
        if (frame.kind === "full" || frame.kind === "end" || frame.kind === "error") {
          resolve(answerOf(frames));
        }
      },
      { idleTimeoutMs: 30_000 },
    );
    o.onSent?.(pending);
  });
}

function answerOf(frames: RouteFrame[]): RouteAnswer {
  const first = frames[0]!;
  const last = frames.at(-1)!;
  const routing = frames.find((f) => f.routing)?.routing;
  const error = last.kind === "error" ? errorOfFrame(last) : undefined;
  return {
    frames,
    status: first.status,
    routing: routing ? parseRoutingHeader(routing) : undefined,
    text: frames
      .filter((f) => f.kind === "full" || f.kind === "chunk")
      .map((f) => new TextDecoder().decode(f.data))
      .join(""),
    error: error && { code: error.code, message: error.message, param: error.param },
  };
}
