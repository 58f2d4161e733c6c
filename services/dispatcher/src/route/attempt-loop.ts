// The loop over attempts: decide, dispatch, judge, and retry or fall back within the
// budget while nothing has reached the client; or wait for capacity, or give up.
import { isTeeTier, serializeRoutingHeader, ZmlError } from "@zml/contracts";
import {
  decide,
  firstByteTimeoutMs,
  nextAttempt,
  priceAgeS,
  resolvePolicy,
  shouldCoolDown,
  tokensOfChars,
} from "@zml/routing";
import type { AttemptFailure, FailedAttempt, PromptPrefix, RankedCandidate } from "@zml/routing";
import { dispatchAttempt, failureOf } from "./dispatch-attempt.ts";
import type { ExecuteDeps, Execution, ExecutionResult } from "./execution.ts";
import type { RoutePath, RouteReport } from "./route-report.ts";
import { recordDecision, startQueueWaitSpan } from "./tracing.ts";

export const runAttempts: RoutePath = async (deps, exec, decisionId, report) => {
  const { request, writer, cancelled } = exec;
  const { log } = report;
  // Intake resolved the policy and sent its name: resolving a name is a lookup. (A job
  // published straight to JetStream may name none; then the model's default applies.)
  const resolved = resolvePolicy(deps.routing.current().snapshot, request);
  if (!resolved.ok) return rejected(report, exec, resolved, null);
  const policy = resolved.policy;
  const models = [request.model, ...request.fallbackModels];
  const failures: FailedAttempt[] = [];
  /** How the last failed attempt failed, in the gateway's words. */
  let lastError = "";
  let queueUntil = 0;

  for (;;) {
    if (cancelled.aborted) return { kind: "cancelled" };
    const now = deps.clock();
    const { snapshot, live } = deps.routing.current();
    const next = nextAttempt({
      models,
      failures,
      deadlineMs: request.deadline,
      now,
      route: (model, exclude, preferFamily) =>
        decide(
          snapshot,
          live,
          {
            model,
            tier: request.tier,
            api: request.api,
            acceleratorHint: preferFamily ?? request.acceleratorHint,
            sort: request.sort,
            expectedTokens: request.maxTokens ?? snapshot.models.get(model)?.default_max_tokens,
            exclude: withUnapproved(deps, exclude, model, request.tier, now),
            prefix: request.prefix,
            random: deps.random,
          },
          policy,
          now,
        ),
    });

    if (next.action === "stop") {
      const rejection = next.rejection;
      if (rejection) recordDecision(decisionId, policy, failures.length + 1, { rejection });
      if (failures.length === 0 && rejection) {
        if (exec.waitForCapacity && rejection.queueForMs > 0) {
          // queue_on_saturation: wait for capacity (woken by state changes and completions),
          // never past the policy's max_queue_ms or the request's deadline.
          if (queueUntil === 0) queueUntil = Math.min(now + rejection.queueForMs, request.deadline);
          const waitSpan = startQueueWaitSpan();
          const woke = await deps.capacity.wait(queueUntil - deps.clock(), cancelled);
          waitSpan.setAttribute("zml.queue.woken", woke);
          waitSpan.end();
          if (woke) continue;
          deps.metrics.queueTimeouts.inc();
        }
        return rejected(report, exec, rejection, policy);
      }
      const last = failures.at(-1);
      const error =
        next.reason === "deadline_exceeded"
          ? new ZmlError("gateway_timeout", "request deadline passed before an attempt succeeded")
          : new ZmlError(
              codeOf(last?.failure),
              `${failures.length} attempt(s) failed; last: ${last ? `${last.nodeId} ${describe(last.failure, lastError)}` : "none"}`,
            );
      report.outcome(next.reason);
      log.warn({ outcome: next.reason, attempts: failures.length }, "request failed");
      writer.error(error.toBody());
      return { kind: "failed", error, attempts: failures.length };
    }

    const { candidate, attempt, model } = next;
    const node = candidate.node;
    recordDecision(decisionId, policy, attempt, { decision: next.decision });
    if (isTeeTier(node.tier)) {
      // Defence in depth: the decision already required a usable attestation.
      const verdict = deps.attestation.verdict(node.id, model, now);
      if (!verdict.usable) {
        const error = new ZmlError("no_usable_node", `attestation not usable: ${verdict.detail}`, {
          param: "model",
          retryAfterS: deps.routing.current().snapshot.options.noNodeRetryAfterS,
          saturation: {
            considered: 1,
            full: 0,
            cooling: 0,
            inactive: 0,
            unattested: 1,
            failed: 0,
          },
        });
        log.error({ node: node.id, reason: verdict.reason }, "attestation gate refused a dispatch");
        writer.error(error.toBody());
        return { kind: "failed", error, attempts: failures.length };
      }
    }
    const routing = serializeRoutingHeader({
      decisionId,
      node: node.id,
      policy: policy.name,
      family: node.accelerator_family,
      queueDepth: Math.round(candidate.queueDepth),
      tier: node.tier,
      attempts: attempt,
      price: candidate.price.source,
      priceAgeS: priceAgeS(candidate.price, now),
      priceStale: candidate.price.stale,
      cachedTokens:
        request.prefix !== undefined && policy.prefixAffinity
          ? Math.round(candidate.cachedTokens)
          : undefined,
    });
    const kind = attempt === 1 ? "first" : model === request.model ? "retry" : "fallback";
    if (kind !== "first") deps.metrics.retries.inc({ kind });

    const firstByteMs = firstByteTimeoutMs(policy, {
      attempt,
      remainingMs: request.deadline - deps.clock(),
      stream: request.stream,
      expectedResponseMs: candidate.responseMs,
      headersTimeoutMs: deps.config.DISPATCH_HEADERS_TIMEOUT_MS,
    });
    const plan = { node, model, attempt, kind, routing, firstByteMs } as const;
    if (request.prefix !== undefined) placePrefix(deps, node.id, request.prefix, candidate);
    const { outcome, latencyMs } = await dispatchAttempt(deps, exec, plan);
    if (cancelled.aborted) {
      report.outcome("cancelled");
      log.info({ node: node.id, attempts: attempt }, "client went away; node call aborted");
      return { kind: "cancelled" };
    }
    report.attempted(node, outcome, latencyMs);

    if (outcome.kind !== "retryable") {
      // A 429 goes back to the client as is, but the node rests at least its Retry-After.
      if (outcome.kind === "relayed" && outcome.status === 429) {
        report.coolDown(node, outcome.retryAfterS, "http_429");
      }
      report.outcome(outcome.kind === "relayed" ? "routed" : "broken");
      // Intake logs one info line per request with its decision id; here the detail is debug,
      // unless the stream broke.
      log[outcome.kind === "relayed" ? "debug" : "warn"](
        {
          node: node.id,
          family: node.accelerator_family,
          model,
          policy: policy.name,
          status: outcome.status,
          attempts: attempt,
          queue_depth: candidate.queueDepth,
          latency_ms: latencyMs,
        },
        outcome.kind === "relayed" ? "request routed" : "stream broke after first byte",
      );
      return { kind: outcome.kind, status: outcome.status, attempts: attempt, routing };
    }
    const failure = failureOf(outcome);
    failures.push({ model, nodeId: node.id, family: node.accelerator_family, failure });
    lastError = outcome.error;
    if (shouldCoolDown(failure)) report.coolDown(node, outcome.retryAfterS, outcome.error);
    // The attempt's first-byte limit: what a timeout waited for.
    log.warn(
      { node: node.id, attempt, error: outcome.error, first_byte_ms: firstByteMs },
      "attempt failed",
    );
  }
};

/**
 * The node will hold the prompt's prefix once it has prefilled it: recorded in this replica's
 * index (with what the decision expected, for the node's hit-rate check) and shared with the
 * other replicas.
 */
function placePrefix(
  deps: ExecuteDeps,
  nodeId: string,
  prefix: PromptPrefix,
  candidate: RankedCandidate,
): void {
  deps.routing.current().live.recordPrefix(nodeId, prefix, {
    expectedBlocks: candidate.cachedBlocks,
    now: deps.clock(),
  });
  deps.placements?.placed(nodeId, prefix);
  deps.metrics.prefixPromptTokens.inc({ node: nodeId }, Math.round(tokensOfChars(prefix.chars)));
  if (candidate.cachedTokens > 0) {
    deps.metrics.prefixExpectedCachedTokens.inc({ node: nodeId }, candidate.cachedTokens);
  }
}

/** No node can take the request: the client gets the rejection's error. */
function rejected(
  report: RouteReport,
  exec: Execution,
  ...args: Parameters<RouteReport["rejected"]>
): ExecutionResult {
  const result = report.rejected(...args);
  exec.writer.error(result.error.toBody());
  return result;
}

/** For tier 3/4, nodes whose attestation does not cover the model are never candidates. */
function withUnapproved(
  deps: ExecuteDeps,
  exclude: ReadonlySet<string>,
  model: string,
  tier: number,
  now: number,
): ReadonlySet<string> {
  if (!isTeeTier(tier)) return exclude;
  const unapproved = deps.attestation.notApprovedFor(model, tier, now);
  return unapproved.size === 0 ? exclude : new Set([...exclude, ...unapproved]);
}

/**
 * The code of a request whose attempts all failed, by how the last one failed: a refused
 * credential or a malformed answer says so (the client's SDK can tell it from its own bad
 * key, or from a node that is merely down); anything else is `upstream_unavailable`.
 */
function codeOf(
  failure: AttemptFailure | undefined,
): "upstream_auth_failed" | "bad_upstream_response" | "upstream_unavailable" {
  if (failure?.kind === "upstream_auth") return "upstream_auth_failed";
  if (failure?.kind === "bad_response") return "bad_upstream_response";
  return "upstream_unavailable";
}

/** A failed attempt for the client's message; `error` is the gateway's own words for it. */
function describe(failure: AttemptFailure, error: string): string {
  if (failure.kind === "status") return `answered ${failure.status}`;
  if (failure.kind === "upstream_auth" || failure.kind === "bad_response") return error;
  return failure.kind;
}
