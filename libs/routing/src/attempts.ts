import type { Decision, RankedCandidate, Rejection } from "./types.ts";

/** Attempts per request, shared by retries on other nodes and the fallback-model chain. */
export const MAX_ATTEMPTS = 3;
/**
 * A retry or fallback needs at least this long before the deadline. A timer set for the
 * deadline can fire a millisecond before the wall clock reaches it; a further attempt then
 * has no time to answer, and would only race the deadline.
 */
export const MIN_RETRY_WINDOW_MS = 20;

/**
 * How one dispatch attempt failed. Besides a status, a network error and a timeout, the
 * gateway refuses two answers a node may give before any byte reached the client:
 * `upstream_auth`, the node's own 401 or 403 (it refused the gateway's credential for it,
 * which says nothing about the client's request), and `bad_response`, an answer that is not
 * what the call is due (no JSON where JSON is due, no SSE where SSE is due).
 */
export type AttemptFailure =
  | { kind: "status"; status: number }
  | { kind: "upstream_auth"; status: number }
  | { kind: "bad_response"; status: number }
  | { kind: "network_error" }
  | { kind: "timeout" };

export interface FailedAttempt {
  model: string;
  nodeId: string;
  family: string;
  failure: AttemptFailure;
  /** True when part of the response had already gone to the client. */
  responseStarted?: boolean | undefined;
}

export type StopReason =
  /** A 4xx (402 and 429 included): the node's response goes back to the client as is. */
  | "client_error"
  /** A status that is neither 4xx nor 5xx; it is not a failure routing can fix. */
  | "not_retryable"
  /** The failure came after the first byte reached the client: end the stream with an error. */
  | "response_started"
  | "attempts_exhausted"
  | "deadline_exceeded"
  /** No untried viable node is left for the model or any fallback model. */
  | "no_candidates";

export type NextAttempt =
  | {
      action: "try";
      /** 1-based number of the attempt about to be made; never above {@link MAX_ATTEMPTS}. */
      attempt: number;
      model: string;
      candidate: RankedCandidate;
      decision: Decision;
    }
  | {
      action: "stop";
      reason: StopReason;
      /** For `no_candidates`: the first rejection met, e.g. to answer 503 before any attempt. */
      rejection?: Rejection;
    };

export interface NextAttemptInput {
  /** The request's model, then its fallback models in order. */
  models: readonly string[];
  /** Every failed attempt of this request so far, oldest first. */
  failures: readonly FailedAttempt[];
  /**
   * Routes one model with the failed nodes excluded; normally a call to {@link decide} with
   * `exclude`, and `preferFamily` (when set) as the accelerator hint so that the failed
   * node's family ranks first.
   */
  route: (
    model: string,
    exclude: ReadonlySet<string>,
    preferFamily: string | undefined,
  ) => Decision | Rejection;
  /** Lower budget than {@link MAX_ATTEMPTS}, e.g. for a pinned session; clamped to 1–3. */
  maxAttempts?: number | undefined;
  /** Absolute deadline (epoch ms) and the current time; no new attempt at or past it. */
  deadlineMs?: number | undefined;
  now?: number | undefined;
}

/**
 * What a failure means for the request. 5xx, network errors (timeouts included) and the
 * answers the gateway refuses (`upstream_auth`, `bad_response`) are retried: another node
 * may answer. Every other 4xx, 429 included, is the client's answer: retrying a rate limit
 * on another node would only spend the budget on the same limit.
 */
export function classifyFailure(
  failure: AttemptFailure,
): "retry" | "client_error" | "not_retryable" {
  if (failure.kind !== "status") return "retry";
  if (failure.status >= 500 && failure.status <= 599) return "retry";
  if (failure.status >= 400 && failure.status <= 499) return "client_error";
  return "not_retryable";
}

/**
 * Whether the failed node should cool down: on retried failures (a node that refuses the
 * gateway's credential or answers garbage will do so for the next request too), and on 429
 * (the node is shedding load even though the request itself is not retried). Other 4xx say
 * nothing bad about the node.
 */
export function shouldCoolDown(failure: AttemptFailure): boolean {
  return (
    classifyFailure(failure) === "retry" || (failure.kind === "status" && failure.status === 429)
  );
}

/**
 * Decides the next attempt of a request after the failures so far (none before the first
 * attempt). It tries the same model first — another node of the failed node's family, then
 * the next one in rank order (so the next family) — and then the fallback models in order.
 * A failed node is never tried again during the request, and the request never gets more
 * than {@link MAX_ATTEMPTS} attempts whatever fails. Rejections of a model (no viable node)
 * do not use up an attempt.
 */
export function nextAttempt(input: NextAttemptInput): NextAttempt {
  const { models, failures } = input;
  const last = failures.at(-1);
  if (last !== undefined) {
    if (last.responseStarted === true) return { action: "stop", reason: "response_started" };
    const kind = classifyFailure(last.failure);
    if (kind !== "retry") return { action: "stop", reason: kind };
  }
  const requested = input.maxAttempts ?? MAX_ATTEMPTS;
  const budget = Number.isFinite(requested)
    ? Math.min(MAX_ATTEMPTS, Math.max(1, Math.trunc(requested)))
    : MAX_ATTEMPTS;
  if (failures.length >= budget) return { action: "stop", reason: "attempts_exhausted" };
  if (input.deadlineMs !== undefined && input.now !== undefined) {
    const window = last === undefined ? 0 : MIN_RETRY_WINDOW_MS;
    if (input.now >= input.deadlineMs - window)
      return { action: "stop", reason: "deadline_exceeded" };
  }

  const exclude = new Set(failures.map((f) => f.nodeId));
  const start = last === undefined ? 0 : Math.max(0, models.indexOf(last.model));
  let rejection: Rejection | undefined;
  for (let m = start; m < models.length; m++) {
    const model = models[m]!;
    const retrySameModel = last !== undefined && last.model === model;
    const decision = input.route(model, exclude, retrySameModel ? last.family : undefined);
    if (!decision.ok) {
      rejection ??= decision;
      continue;
    }
    const untried = decision.candidates.filter((c) => !exclude.has(c.node.id));
    const sameFamily = retrySameModel
      ? untried.find((c) => c.node.accelerator_family === last.family)
      : undefined;
    const candidate = sameFamily ?? untried[0];
    if (candidate === undefined) continue;
    return { action: "try", attempt: failures.length + 1, model, candidate, decision };
  }
  const stop: NextAttempt = { action: "stop", reason: "no_candidates" };
  if (rejection !== undefined) stop.rejection = rejection;
  return stop;
}
