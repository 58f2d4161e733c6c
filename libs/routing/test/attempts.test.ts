import { describe, expect, it } from "vitest";
import {
  classifyFailure,
  decide,
  MIN_RETRY_WINDOW_MS,
  nextAttempt,
  shouldCoolDown,
  type AttemptFailure,
  type FailedAttempt,
  type NextAttempt,
} from "../src/index.ts";
import { fleet, MODEL, node, NOW, onPrem, policy } from "./fixtures.ts";

const http = (status: number): AttemptFailure => ({ kind: "status", status });
const network: AttemptFailure = { kind: "network_error" };

function setup(costPriority: "latency" | "cost" = "latency") {
  const nodes = [
    node("h1"),
    node("h2"),
    node("m1", { accelerator_family: "MI300X" }),
    node("x1", { models: ["fallback"] }),
  ];
  const costs = [
    onPrem({ node_id: "h1" }, 1),
    onPrem({ node_id: "m1" }, 2),
    onPrem({ node_id: "h2" }, 3),
  ];
  const { snapshot, live } = fleet(nodes, { costs });
  const pol = policy({ cost_priority: costPriority });
  const route = (model: string, exclude: ReadonlySet<string>, preferFamily: string | undefined) =>
    decide(snapshot, live, { model, tier: 1, exclude, acceleratorHint: preferFamily }, pol, NOW);
  return { snapshot, live, route };
}

function tried(next: NextAttempt): string {
  if (next.action !== "try") throw new Error(`stopped: ${next.reason}`);
  return next.candidate.node.id;
}

function fail(next: NextAttempt, failure: AttemptFailure): FailedAttempt {
  if (next.action !== "try") throw new Error(`stopped: ${next.reason}`);
  return {
    model: next.model,
    nodeId: next.candidate.node.id,
    family: next.candidate.node.accelerator_family,
    failure,
  };
}

describe("nextAttempt", () => {
  it("retries 5xx and network errors on the same family, then the next, never past 3", () => {
    const { route } = setup();
    const models = [MODEL];
    const failures: FailedAttempt[] = [];
    const first = nextAttempt({ models, failures, route });
    expect(tried(first)).toBe("h1");
    expect(first.action === "try" && first.attempt).toBe(1);
    failures.push(fail(first, http(503)));
    const second = nextAttempt({ models, failures, route });
    expect(tried(second)).toBe("h2");
    failures.push(fail(second, network));
    const third = nextAttempt({ models, failures, route });
    expect(tried(third)).toBe("m1");
    expect(third.action === "try" && third.attempt).toBe(3);
    failures.push(fail(third, { kind: "timeout" }));
    expect(nextAttempt({ models, failures, route })).toEqual({
      action: "stop",
      reason: "attempts_exhausted",
    });
  });

  it("stays on the failed node's family even when the ranking interleaves families", () => {
    // Cost ranking: h1 ($1), m1 ($2), h2 ($3).
    const { route } = setup("cost");
    const first = nextAttempt({ models: [MODEL], failures: [], route });
    expect(first.action === "try" && first.decision.candidates.map((c) => c.node.id)).toEqual([
      "h1",
      "m1",
      "h2",
    ]);
    expect(tried(nextAttempt({ models: [MODEL], failures: [fail(first, http(500))], route }))).toBe(
      "h2",
    );
  });

  it.each([400, 401, 402, 404, 413, 429])(
    "returns %i as is, without retry or fallback",
    (status) => {
      const { route } = setup();
      const first = nextAttempt({ models: [MODEL, "fallback"], failures: [], route });
      expect(
        nextAttempt({ models: [MODEL, "fallback"], failures: [fail(first, http(status))], route }),
      ).toEqual({
        action: "stop",
        reason: "client_error",
      });
    },
  );

  it("moves to the fallback models once the model has no untried node", () => {
    const { route } = setup();
    const models = ["fallback", MODEL];
    const first = nextAttempt({ models, failures: [], route });
    expect(first.action === "try" && first.model).toBe("fallback");
    const second = nextAttempt({ models, failures: [fail(first, http(502))], route });
    expect(second.action === "try" && [second.model, second.candidate.node.id]).toEqual([
      MODEL,
      "h1",
    ]);
  });

  it("a model with no viable node costs no attempt: the fallback gets the first one", () => {
    const { route, live } = setup();
    for (const id of ["h1", "h2", "m1"]) live.coolDown(id, NOW + 30_000);
    const first = nextAttempt({ models: [MODEL, "fallback"], failures: [], route });
    expect(first.action === "try" && [first.attempt, first.model]).toEqual([1, "fallback"]);
  });

  it("stops with the rejection when nothing is left anywhere", () => {
    const { route, live } = setup();
    for (const id of ["h1", "h2", "m1"]) live.coolDown(id, NOW + 30_000);
    const stop = nextAttempt({ models: [MODEL], failures: [], route });
    expect(stop).toMatchObject({
      action: "stop",
      reason: "no_candidates",
      rejection: { reason: "saturated" },
    });
  });

  it("never retries once the response has started", () => {
    const { route } = setup();
    const first = nextAttempt({ models: [MODEL], failures: [], route });
    const broken = { ...fail(first, network), responseStarted: true };
    expect(nextAttempt({ models: [MODEL], failures: [broken], route })).toEqual({
      action: "stop",
      reason: "response_started",
    });
  });

  it("honours a smaller budget and the deadline", () => {
    const { route } = setup();
    const first = nextAttempt({ models: [MODEL], failures: [], route });
    const failures = [fail(first, http(500))];
    expect(nextAttempt({ models: [MODEL], failures, route, maxAttempts: 1 })).toMatchObject({
      reason: "attempts_exhausted",
    });
    expect(nextAttempt({ models: [MODEL], failures, route, maxAttempts: 99 }).action).toBe("try");
    expect(
      nextAttempt({ models: [MODEL], failures, route, deadlineMs: NOW, now: NOW }),
    ).toMatchObject({
      reason: "deadline_exceeded",
    });
    // A retry with almost no time left is not started; a first attempt still is.
    const almost = { deadlineMs: NOW + MIN_RETRY_WINDOW_MS - 1, now: NOW };
    expect(nextAttempt({ models: [MODEL], failures, route, ...almost })).toMatchObject({
      reason: "deadline_exceeded",
    });
    expect(nextAttempt({ models: [MODEL], failures: [], route, ...almost }).action).toBe("try");
    const enough = { deadlineMs: NOW + MIN_RETRY_WINDOW_MS + 1, now: NOW };
    expect(nextAttempt({ models: [MODEL], failures, route, ...enough }).action).toBe("try");
  });
});

describe("failure classification", () => {
  it("retries only 5xx and network errors", () => {
    expect(classifyFailure(http(500))).toBe("retry");
    expect(classifyFailure(http(599))).toBe("retry");
    expect(classifyFailure(network)).toBe("retry");
    expect(classifyFailure({ kind: "timeout" })).toBe("retry");
    expect(classifyFailure(http(429))).toBe("client_error");
    expect(classifyFailure(http(402))).toBe("client_error");
    expect(classifyFailure(http(302))).toBe("not_retryable");
    // A node's own 401/403 is about the gateway's credential, not the client's request.
    expect(classifyFailure({ kind: "upstream_auth", status: 401 })).toBe("retry");
    expect(classifyFailure({ kind: "bad_response", status: 200 })).toBe("retry");
  });

  it("cools a node down after a retried failure or a 429, not after other 4xx", () => {
    expect(shouldCoolDown(http(503))).toBe(true);
    expect(shouldCoolDown(network)).toBe(true);
    expect(shouldCoolDown(http(429))).toBe(true);
    expect(shouldCoolDown(http(400))).toBe(false);
    expect(shouldCoolDown(http(402))).toBe(false);
    expect(shouldCoolDown({ kind: "upstream_auth", status: 403 })).toBe(true);
    expect(shouldCoolDown({ kind: "bad_response", status: 200 })).toBe(true);
  });
});
