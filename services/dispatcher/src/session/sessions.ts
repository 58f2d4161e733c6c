// Opening and ending tier-4 sessions (`zml.session.create`, `zml.session.delete`), served by
// every dispatcher replica in the queue group. Opening picks a node with the routing core
// and has it attested afresh with a session key: rerouting is allowed only here, before the
// session id exists.
import { requestJson, serveJson } from "@zml/bus";
import type { Bus, Subscription } from "@zml/bus";
import {
  ATTESTATION_VERIFY_ENDPOINT,
  attestationVerdict,
  SESSION_CREATE_BUDGET_MS,
  SESSION_CREATE_ENDPOINT,
  SESSION_DEFAULT_TTL_S,
  SESSION_DELETE_ENDPOINT,
  SESSION_KEY_GRACE_S,
  ZmlError,
} from "@zml/contracts";
import type {
  AccountSpec,
  AttestationResult,
  AttestationVerifyReply,
  AttestationVerifyRequest,
  NodeState,
  Revocation,
  Session,
  SessionAttestation,
  SessionCreateReply,
  SessionDeleteReply,
  SessionCreateRequestSchema,
  SessionDeleteRequestSchema,
} from "@zml/contracts";
import { decide, MAX_ATTEMPTS, resolvePolicy } from "@zml/routing";
import type { ResolvedPolicy } from "@zml/routing";
import type { Logger } from "@zml/telemetry";
import type { z } from "zod";
import type { RoutingState } from "../fleet/routing-state.ts";
import type { DispatcherMetrics } from "../metrics.ts";
import type { AttestationGate } from "../node/attestation-gate.ts";
import type { SessionStore } from "./session-store.ts";

/** One verify round trip may wait for the node's quote (the attestation service allows 5 s). */
const VERIFY_TIMEOUT_MS = 10_000;
const SESSION_TIER = 4;

/** `zml.attestation.verify` as a function; rejects when no answer comes within the timeout. */
export type VerifyAttestation = (
  request: AttestationVerifyRequest,
  timeoutMs: number,
) => Promise<AttestationVerifyReply>;

export interface SessionServiceDeps {
  routing: RoutingState;
  attestation: AttestationGate;
  accounts: ReadonlyMap<string, AccountSpec>;
  states: ReadonlyMap<string, NodeState>;
  revocations: ReadonlyMap<string, Revocation>;
  /** Latest background attestation results, whose TLS key the dispatch pins. */
  results: ReadonlyMap<string, AttestationResult>;
  store: SessionStore;
  verify: VerifyAttestation;
  log: Logger;
  metrics: DispatcherMetrics;
  clock: () => number;
  random: () => number;
  newNonce: () => string;
  newSessionId: () => string;
  /** Tells the session's TD to drop the session's key (`NODE_SESSION_KEYS_PATH`). */
  dropSessionKey: (session: Session) => Promise<void>;
}

export type SessionCreate = z.output<typeof SessionCreateRequestSchema>;
export type SessionDelete = z.output<typeof SessionDeleteRequestSchema>;

export interface SessionService {
  create(request: SessionCreate): Promise<SessionCreateReply>;
  remove(request: SessionDelete): Promise<SessionDeleteReply>;
}

const CREATED = "session.create.reply.v1" as const;
const DELETED = "session.delete.reply.v1" as const;

export function createSessionService(deps: SessionServiceDeps): SessionService {
  const fail = (error: ZmlError): SessionCreateReply => {
    deps.metrics.sessions.inc({ outcome: `create_${error.code}` });
    return { type: CREATED, error: error.toBody() };
  };

  return {
    async create(request) {
      const account = deps.accounts.get(request.account);
      if (!account?.allowed_tiers.includes(SESSION_TIER)) {
        return fail(
          new ZmlError("tier_not_allowed", "account may not use tier 4", { param: "tier" }),
        );
      }
      // Intake resolved the policy; naming it here is a lookup (or the same resolution,
      // for a request that names none).
      const { snapshot } = deps.routing.current();
      const resolved = resolvePolicy(snapshot, request, account);
      if (!resolved.ok)
        return fail(new ZmlError(resolved.code, resolved.detail, { param: "policy" }));

      const ttlS = request.ttl_s ?? SESSION_DEFAULT_TTL_S;
      const deadline = deps.clock() + SESSION_CREATE_BUDGET_MS;
      const tried = new Set<string>();
      const problems: string[] = [];
      while (tried.size < MAX_ATTEMPTS) {
        const candidate = pickNode(deps, request.model, resolved.policy, tried);
        if (!candidate.ok) {
          if (tried.size === 0) return fail(candidate.error);
          break;
        }
        const nodeId = candidate.nodeId;
        tried.add(nodeId);
        const remaining = deadline - deps.clock();
        if (remaining <= 0) break;
        const nonce = request.nonce ?? deps.newNonce();
        let reply: AttestationVerifyReply;
        try {
          reply = await deps.verify(
            {
              type: "attestation.verify.v1",
              node_id: nodeId,
              nonce,
              session_key: true,
              // The TD drops the session's key by itself once the session has expired.
              session_ttl_s: ttlS + SESSION_KEY_GRACE_S,
            },
            Math.min(VERIFY_TIMEOUT_MS, remaining),
          );
        } catch (error) {
          problems.push(`${nodeId}: attestation service did not answer (${String(error)})`);
          continue;
        }
        const attested = sessionAttestation(deps, reply, nonce, request.model);
        if (!attested.ok) {
          problems.push(`${nodeId}: ${attested.problem}`);
          deps.log.warn({ node: nodeId, problem: attested.problem }, "session attestation refused");
          continue;
        }
        const now = deps.clock();
        const session: Session = {
          type: "session.v1",
          session_id: deps.newSessionId(),
          account: account.id,
          model: request.model,
          node_id: nodeId,
          node_instance_id: deps.states.get(nodeId)?.instance_id ?? null,
          tier: SESSION_TIER,
          policy: resolved.policy.name,
          created_at: now,
          expires_at: now + ttlS * 1000,
          attestation: attested.attestation,
          ended: null,
        };
        await deps.store.create(session);
        deps.metrics.sessions.inc({ outcome: "created" });
        deps.log.info(
          { session: session.session_id, node: nodeId, candidates_tried: tried.size },
          "session opened",
        );
        return { type: CREATED, session };
      }
      return fail(
        new ZmlError(
          "no_node_available",
          `no tier-4 node could be attested for a session: ${problems.join("; ") || "out of time"}`,
          { param: "model", retryAfterS: 5 },
        ),
      );
    },

    async remove(request) {
      const session = await deps.store.lookup(request.session_id);
      if (
        session === undefined ||
        session.account !== request.account ||
        session.ended?.reason_code === "deleted"
      ) {
        const error = new ZmlError("session_not_found", `no session ${request.session_id}`, {
          param: "session_id",
        });
        return { type: DELETED, error: error.toBody() };
      }
      await deps.store.end(session, "deleted", "deleted by its owner", deps.clock());
      deps.metrics.sessions.inc({ outcome: "deleted" });
      deps.log.info({ session: session.session_id, node: session.node_id }, "session deleted");
      // The session's requests are refused from here on whatever the node does; dropping
      // the key on the TD too means nothing sealed to it can ever be opened again.
      await deps
        .dropSessionKey(session)
        .catch((err: unknown) =>
          deps.log.warn(
            { session: session.session_id, node: session.node_id, err: String(err) },
            "the node did not drop the session key; it expires with the session",
          ),
        );
      return { type: DELETED, deleted: true };
    },
  };
}

/** The best tier-4 node for the model that has not been tried, by the routing core. */
function pickNode(
  deps: SessionServiceDeps,
  model: string,
  policy: ResolvedPolicy,
  tried: ReadonlySet<string>,
): { ok: true; nodeId: string } | { ok: false; error: ZmlError } {
  const now = deps.clock();
  const { snapshot, live } = deps.routing.current();
  const exclude = new Set([...tried, ...deps.attestation.notApprovedFor(model, SESSION_TIER, now)]);
  const decision = decide(
    snapshot,
    live,
    { model, tier: SESSION_TIER, exclude, random: deps.random },
    policy,
    now,
  );
  if (!decision.ok) {
    return {
      ok: false,
      error: new ZmlError(decision.code, decision.detail, {
        param: "model",
        retryAfterS: decision.retryAfterS,
      }),
    };
  }
  return { ok: true, nodeId: decision.candidates[0]!.node.id };
}

/**
 * The session's attestation when the reply vouches for a fresh, session-key-bound,
 * unrevoked quote whose measurement is approved for the model; else why not.
 */
function sessionAttestation(
  deps: Pick<SessionServiceDeps, "revocations" | "clock" | "results">,
  reply: AttestationVerifyReply,
  nonce: string,
  model: string,
): { ok: true; attestation: SessionAttestation } | { ok: false; problem: string } {
  const refuse = (problem: string) => ({ ok: false as const, problem });
  if ("error" in reply) return refuse(`${reply.error.code}: ${reply.error.message}`);
  const r = reply.result;
  const verdict = attestationVerdict(r, deps.revocations.values(), deps.clock(), model);
  if (!verdict.usable) return refuse(`${verdict.reason}: ${verdict.detail}`);
  if (r.nonce_hex !== nonce) return refuse("the result is not for this nonce");
  if (r.session_public_key === null || r.quote_b64 === null || r.measurement === null) {
    return refuse("the result carries no session key");
  }
  // The session's requests travel on connections pinned to the background attestation's
  // key; a session attested under another key could not be reached by them.
  const pinned = deps.results.get(r.node_id)?.tls_key_sha256 ?? null;
  if (r.tls_key_sha256 === null || r.tls_key_sha256 !== pinned) {
    return refuse("the session was attested under another TLS key than the pinned one");
  }
  return {
    ok: true,
    attestation: {
      quote_b64: r.quote_b64,
      nonce_hex: nonce,
      session_public_key: r.session_public_key,
      tls_key_sha256: r.tls_key_sha256,
      measurement: r.measurement,
      tcb_status: r.tcb_status,
      verified_at: r.verified_at,
    },
  };
}

/** `zml.attestation.verify` over the bus, with the active trace context. */
export function createVerifyClient(bus: Bus): VerifyAttestation {
  return (request, timeoutMs) =>
    requestJson(bus, ATTESTATION_VERIFY_ENDPOINT, request, {
      timeoutMs,
      service: "the attestation service",
    });
}

/** Serves both session subjects in the dispatchers' queue group; bad input gets an error reply. */
export function serveSessions(bus: Bus, service: SessionService, log: Logger): Subscription[] {
  return [
    serveJson(bus, SESSION_CREATE_ENDPOINT, (r) => service.create(r), { log }),
    serveJson(bus, SESSION_DELETE_ENDPOINT, (r) => service.remove(r), { log }),
  ];
}
