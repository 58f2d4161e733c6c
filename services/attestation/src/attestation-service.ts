// The attestation cache: one latest result per tier 3/4 node, refreshed in the background
// before it expires, invalidated at once by revocations, and served to verify requests.
// I/O comes in through ports (attest, publish, schedule), so the logic is tested directly.
import {
  ATTESTATION_FAILURES,
  attestationVerdict,
  findRevocation,
  isTeeTier,
} from "@zml/contracts";
import type {
  AttestationResult,
  AttestationVerifyReply,
  NodeSpec,
  Revocation,
} from "@zml/contracts";
import type { Attest } from "./attestor.ts";
import { failedResult, revokedResult } from "./evaluate.ts";
import type { TeeNode } from "./evaluate.ts";

/** Runs `fn` after `delayMs`; returns a function that cancels it. */
export type Schedule = (fn: () => void, delayMs: number) => () => void;

export interface ServiceLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

export interface AttestationServiceDeps {
  attest: Attest;
  newNonce(): string;
  /** Writes the node's result to KV and broadcasts it. */
  publish(result: AttestationResult): void;
  /** Removes a node's result (the node left the fleet or is no longer tier 3/4). */
  unpublish(nodeId: string): void;
  revocations(): Iterable<Revocation>;
  now(): number;
  schedule: Schedule;
  /** Validity of a passed attestation; refreshed after half of its actual lifetime. */
  ttlMs: number;
  /** Delay before a failed attestation is tried again. */
  retryMs: number;
  log: ServiceLogger;
}

export interface VerifyOptions {
  nonce?: string | undefined;
  fresh?: boolean | undefined;
  /** With `nonce` only: also have the node bind a fresh session key (never cached). */
  sessionKey?: boolean | undefined;
  /** With `sessionKey`: how long the node keeps it, in seconds. */
  sessionTtlS?: number | undefined;
}

export interface AttestationService {
  /** Results left in KV by an earlier run: kept until re-attested, revocations applied now. */
  seed(results: Iterable<AttestationResult>): void;
  /** The whole node table changed (or was loaded): attest new or changed tier 3/4 nodes. */
  syncNodes(nodes: ReadonlyMap<string, NodeSpec>): void;
  /** The revocation list changed: invalidate matching results, re-attest lifted ones. */
  revocationsChanged(): void;
  /** Approved measurements changed: re-attest every node. */
  measurementsChanged(): void;
  verify(nodeId: string, options?: VerifyOptions): Promise<AttestationVerifyReply>;
  /** The node's current result, if any. */
  result(nodeId: string): AttestationResult | undefined;
  stop(): void;
}

interface Entry {
  node: TeeNode;
  /** Bumped when the node's spec changes or it leaves: late results of older runs are dropped. */
  generation: number;
  inflight: Promise<AttestationResult> | undefined;
  cancelTimer: (() => void) | undefined;
}

const MAX_TIMER_MS = 2_147_483_647;
const REPLY = "attestation.verify.reply.v1" as const;

function teeNode(spec: NodeSpec): TeeNode | undefined {
  if (!isTeeTier(spec.tier)) return undefined;
  return { id: spec.id, tier: spec.tier, endpoint: spec.endpoint, models: [...spec.models] };
}

function sameNode(a: TeeNode, b: TeeNode): boolean {
  return (
    a.tier === b.tier &&
    a.endpoint === b.endpoint &&
    a.models.length === b.models.length &&
    a.models.every((m, i) => m === b.models[i])
  );
}

export function createAttestationService(deps: AttestationServiceDeps): AttestationService {
  const entries = new Map<string, Entry>();
  const results = new Map<string, AttestationResult>();
  // Specs of every node, tier 1/2 included, so verify can tell "not a TEE node" from "unknown".
  let specs: ReadonlyMap<string, NodeSpec> = new Map();
  let stopped = false;

  const set = (result: AttestationResult) => {
    results.set(result.node_id, result);
    deps.publish(result);
  };

  const drop = (nodeId: string) => {
    const entry = entries.get(nodeId);
    if (entry) {
      entry.generation += 1;
      entry.cancelTimer?.();
      entries.delete(nodeId);
    }
    if (results.delete(nodeId)) deps.unpublish(nodeId);
  };

  const scheduleNext = (entry: Entry, delayMs: number) => {
    entry.cancelTimer?.();
    if (stopped) return;
    const delay = Math.min(Math.max(delayMs, 0), MAX_TIMER_MS);
    entry.cancelTimer = deps.schedule(() => {
      entry.cancelTimer = undefined;
      void attestNow(entry.node.id);
    }, delay);
  };

  /** Applies the revocation list to one node; returns the (possibly new) result. */
  const reconcile = (nodeId: string): void => {
    const current = results.get(nodeId);
    const entry = entries.get(nodeId);
    const subject = current ?? (entry ? { node_id: nodeId } : undefined);
    if (!subject) return;
    const revocation = findRevocation(deps.revocations(), subject);
    if (revocation) {
      if (current?.revocation?.id === revocation.id) return;
      const base =
        current ?? failedResult(entry!.node, deps.now(), ATTESTATION_FAILURES.revoked, "");
      set(revokedResult(base, revocation, deps.now()));
      deps.log.info({ node: nodeId, revocation: revocation.id }, "attestation revoked");
    } else if (current?.reason_code === ATTESTATION_FAILURES.revoked && entry) {
      // The revocation was lifted: only a new quote can make the node usable again.
      void attestNow(nodeId);
    }
  };

  const record = (entry: Entry, generation: number, fresh: AttestationResult) => {
    if (stopped || entry.generation !== generation || entries.get(entry.node.id) !== entry) {
      return results.get(entry.node.id) ?? fresh;
    }
    const now = deps.now();
    const previous = results.get(entry.node.id);
    if (
      fresh.reason_code === ATTESTATION_FAILURES.quoteUnavailable &&
      previous !== undefined &&
      attestationVerdict(previous, deps.revocations(), now).usable
    ) {
      // A node briefly unreachable keeps its still-valid attestation until it expires; any
      // verification failure, by contrast, replaces it at once.
      deps.log.warn(
        { node: entry.node.id, reason: fresh.reason },
        "re-attestation failed; keeping the valid result",
      );
      scheduleNext(entry, Math.min(deps.retryMs, previous.expires_at - now));
      return previous;
    }
    const revocation = findRevocation(deps.revocations(), fresh);
    const result =
      revocation && fresh.reason_code !== ATTESTATION_FAILURES.revoked
        ? revokedResult(fresh, revocation, now)
        : fresh;
    set(result);
    if (result.ok) {
      scheduleNext(entry, (result.expires_at - result.verified_at) / 2);
    } else if (result.reason_code === ATTESTATION_FAILURES.revoked) {
      scheduleNext(entry, deps.ttlMs / 2);
    } else {
      scheduleNext(entry, deps.retryMs);
    }
    return result;
  };

  const attestNow = (nodeId: string): Promise<AttestationResult> | undefined => {
    const entry = entries.get(nodeId);
    if (!entry || stopped) return undefined;
    if (entry.inflight) return entry.inflight;
    entry.cancelTimer?.();
    entry.cancelTimer = undefined;
    const generation = entry.generation;
    const run = deps
      .attest(entry.node, deps.newNonce())
      .then((fresh) => record(entry, generation, fresh))
      .finally(() => {
        if (entry.inflight === run) entry.inflight = undefined;
      });
    entry.inflight = run;
    return run;
  };

  /** A cached result that a verify request may be answered with, without a new quote. */
  const servable = (result: AttestationResult, now: number): boolean => {
    const verdict = attestationVerdict(result, deps.revocations(), now);
    if (verdict.usable || verdict.reason === "revoked") return true;
    // Failed recently: a new quote now would most likely fail the same way.
    return verdict.reason === "failed" && now - result.verified_at < deps.retryMs;
  };

  return {
    seed(seeded) {
      for (const result of seeded) {
        results.set(result.node_id, result);
        reconcile(result.node_id);
      }
    },

    syncNodes(nodes) {
      specs = nodes;
      for (const spec of nodes.values()) {
        const node = teeNode(spec);
        if (!node) continue;
        const entry = entries.get(spec.id);
        if (entry && sameNode(entry.node, node)) continue;
        if (entry) {
          // Another endpoint or model list: the old result vouched for something else.
          entry.generation += 1;
          entry.cancelTimer?.();
          if (results.delete(spec.id)) deps.unpublish(spec.id);
        }
        entries.set(spec.id, {
          node,
          generation: (entry?.generation ?? 0) + 1,
          inflight: undefined,
          cancelTimer: undefined,
        });
        reconcile(spec.id);
        void attestNow(spec.id);
      }
      for (const id of new Set([...entries.keys(), ...results.keys()])) {
        const spec = nodes.get(id);
        if (!spec || !isTeeTier(spec.tier)) drop(id);
      }
    },

    revocationsChanged() {
      for (const id of new Set([...entries.keys(), ...results.keys()])) reconcile(id);
    },

    measurementsChanged() {
      for (const id of entries.keys()) void attestNow(id);
    },

    async verify(nodeId, options = {}) {
      const entry = entries.get(nodeId);
      if (!entry) {
        const spec = specs.get(nodeId);
        return spec
          ? {
              type: REPLY,
              error: { code: "not_tee_node", message: `node ${nodeId} is tier ${spec.tier}` },
            }
          : { type: REPLY, error: { code: "unknown_node", message: `no node ${nodeId}` } };
      }
      if (options.nonce !== undefined) {
        const sessionKey = options.sessionKey === true;
        return {
          type: REPLY,
          result: await deps.attest(entry.node, options.nonce, {
            sessionKey,
            sessionTtlS: options.sessionTtlS,
          }),
        };
      }
      if (options.sessionKey === true) {
        return {
          type: REPLY,
          error: { code: "invalid_request", message: "session_key needs a nonce" },
        };
      }
      const cached = results.get(nodeId);
      if (!options.fresh && cached && servable(cached, deps.now())) {
        return { type: REPLY, result: cached };
      }
      const result = await attestNow(nodeId);
      return result
        ? { type: REPLY, result }
        : { type: REPLY, error: { code: "unknown_node", message: `node ${nodeId} left` } };
    },

    result: (nodeId) => results.get(nodeId),

    stop() {
      stopped = true;
      for (const entry of entries.values()) {
        entry.generation += 1;
        entry.cancelTimer?.();
      }
    },
  };
}
