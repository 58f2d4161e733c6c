import { readFileSync } from "node:fs";
import { join } from "node:path";
import { chainPolicy } from "@zml/contracts/testing";
import { pollUntil, repoRoot } from "@zml/harness";
import { parsePrometheusText } from "@zml/health";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chat } from "../support/http.ts";
import { startOtlpReceiver } from "../support/otlp-receiver.ts";
import type { ReceivedSpan } from "../support/otlp-receiver.ts";
import { API_KEY, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

const SECRET_PROMPT = "zebra-violet-4471 my card number is 4111";
let otlp: Awaited<ReturnType<typeof startOtlpReceiver>>;
let stack: Stack;

beforeAll(async () => {
  otlp = await startOtlpReceiver();
  stack = await startActiveStack({
    nodes: [
      { nodeId: "o-h100-a", family: "H100", models: ["obs"] },
      { nodeId: "o-h100-b", family: "H100", models: ["obs"] },
      { nodeId: "o-mi300x", family: "MI300X", models: ["obs"] },
      { nodeId: "o-retry-bad", family: "A100", models: ["obs-retry"] },
      { nodeId: "o-retry-good", family: "H100", models: ["obs-retry"] },
    ],
    fleet: {
      models: [
        { id: "obs", default_policy: "chain" },
        { id: "obs-retry", default_policy: "chain" },
        { id: "obs-none" },
      ],
      policies: [chainPolicy("chain", ["H100", "MI300X", "A100"])],
    },
    env: {
      OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
      OTEL_BSP_SCHEDULE_DELAY: "100",
      NODE_COOLDOWN_MS: "1",
    },
  });
});
afterAll(async () => {
  await stack?.stop();
  await otlp?.close();
});

const secretChat = (model: string) =>
  chat(model, { messages: [{ role: "user", content: SECRET_PROMPT }] });

/** All spans of the trace the gateway created for a request id, once both services exported. */
async function traceOf(requestId: string): Promise<ReceivedSpan[]> {
  return pollUntil(
    () => {
      const root = otlp.spans.find(
        (s) => s.service === "zml-intake" && s.attributes["zml.request_id"] === requestId,
      );
      if (!root) return undefined;
      const trace = otlp.spans.filter((s) => s.traceId === root.traceId);
      // Spans are exported in batches as they end, a parent after its children: wait until
      // every span but the root has its parent, or a slow export reads as a broken trace.
      const ids = new Set(trace.map((s) => s.spanId));
      const orphans = trace.filter((s) => s !== root && !ids.has(s.parentSpanId));
      return orphans.length === 0 &&
        trace.some((s) => s.service === "zml-dispatcher" && s.name !== "zml.decision")
        ? trace
        : undefined;
    },
    { timeoutMs: 15_000, message: `trace of ${requestId}` },
  );
}

async function send(requestId: string, body: unknown) {
  const res = await request(`${stack.intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${API_KEY}`,
      "content-type": "application/json",
      "x-request-id": requestId,
    },
    body: JSON.stringify(body),
  });
  await res.body.text();
  return res.statusCode;
}

function expectConnected(trace: ReceivedSpan[]): void {
  const ids = new Set(trace.map((s) => s.spanId));
  const roots = trace.filter((s) => !ids.has(s.parentSpanId));
  expect(roots.map((s) => `${s.service}:${s.name}`)).toEqual([
    "zml-intake:POST /v1/chat/completions",
  ]);
  expect(new Set(trace.map((s) => s.service))).toEqual(new Set(["zml-intake", "zml-dispatcher"]));
}

describe("every routing decision is one connected trace", () => {
  it("a success: intake → NATS → decision → one attempt, with the decision's attributes", async () => {
    expect(await send("obs-ok", secretChat("obs"))).toBe(200);
    const trace = await traceOf("obs-ok");
    expectConnected(trace);
    const decision = trace.find((s) => s.name === "zml.decision")!;
    expect(decision.attributes).toMatchObject({
      "zml.policy": "chain",
      "zml.cost_priority": "latency",
      "zml.tier": 1,
      "zml.family": "H100",
      "zml.attempt": 1,
      "zml.outcome": "chosen",
    });
    for (const key of [
      "zml.decision_id",
      "zml.node",
      "zml.queue_depth",
      "zml.estimate.response_ms",
    ]) {
      expect(decision.attributes[key], key).toBeDefined();
    }
    const intake = trace.find((s) => s.service === "zml-intake")!;
    expect(intake.attributes["zml.decision_id"]).toBe(decision.attributes["zml.decision_id"]);
    const attempts = trace.filter((s) => s.name === "POST" && s.kind === 3);
    expect(attempts).toHaveLength(1);
    expect(attempts[0]!.attributes["http.response.status_code"]).toBe(200);
  });

  it("a retry: two attempts in the same trace, the first answering 500", async () => {
    stack.sims.get("o-retry-bad")!.setFault({ kind: "status", status: 500 });
    // The hint makes the failing A100 node the first choice; the retry goes to the H100 one.
    const body = { ...secretChat("obs-retry"), accelerator_hint: "A100" };
    expect(await send("obs-retry", body)).toBe(200);
    const trace = await traceOf("obs-retry");
    expectConnected(trace);
    const attempts = trace.filter((s) => s.name === "POST" && s.kind === 3);
    expect(attempts.map((s) => s.attributes["http.response.status_code"])).toEqual([500, 200]);
    expect(attempts.map((s) => s.attributes["zml.node"])).toEqual(["o-retry-bad", "o-retry-good"]);
    expect(attempts[1]!.attributes["zml.attempt.kind"]).toBe("retry");
    expect(trace.filter((s) => s.name === "zml.decision")).toHaveLength(2);
  });

  it("a fallback to the next family, with the passed-over candidates as events", async () => {
    for (const id of ["o-h100-a", "o-h100-b"])
      stack.sims.get(id)!.setFault({ kind: "status", status: 503 });
    expect(await send("obs-fallback", secretChat("obs"))).toBe(200);
    const trace = await traceOf("obs-fallback");
    expectConnected(trace);
    const attempts = trace.filter((s) => s.name === "POST" && s.kind === 3);
    expect(attempts.map((s) => s.attributes["zml.family"])).toEqual(["H100", "H100", "MI300X"]);
    const last = trace.filter((s) => s.name === "zml.decision").at(-1)!;
    expect(last.attributes["zml.family"]).toBe("MI300X");
    const reasons = last.events
      .filter((e) => e.name === "zml.candidate.passed_over")
      .map((e) => e.attributes["zml.reason"]);
    expect(reasons.length).toBeGreaterThan(0);
  });

  it("a 503: the rejection is traced with its reason", async () => {
    expect(await send("obs-503", secretChat("obs-none"))).toBe(503);
    const trace = await traceOf("obs-503");
    expectConnected(trace);
    const decision = trace.find((s) => s.name === "zml.decision")!;
    expect(decision.attributes).toMatchObject({ "zml.outcome": "rejected" });
    expect(decision.attributes["zml.rejection.reason"]).toBeTruthy();
    expect(
      trace.find((s) => s.service === "zml-intake")!.attributes["http.response.status_code"],
    ).toBe(503);
  });
});

describe("docs/sre-guide.md, checked against what the services emit", () => {
  const guide = readFileSync(join(repoRoot(), "docs/sre-guide.md"), "utf8");

  it("draws the trace tree the services export", async () => {
    // The tree under "Reading the trace": each line's span name and its depth.
    const block = /## Reading the trace\s+```\n([\s\S]*?)```/.exec(guide)![1]!;
    const drawn = block
      .trimEnd()
      .split("\n")
      .map((line) => {
        const m = /^([\s│├└─]*)(.+?)(\s{2,}\(|$)/.exec(line)!;
        return { depth: m[1]!.length / 4, name: m[2]! };
      })
      // A span drawn twice (a second decision, a second attempt) is checked once.
      .filter((d, i, all) => all.findIndex((e) => e.name === d.name) === i);
    const parentOf = (i: number) =>
      drawn.slice(0, i).findLast((d) => d.depth === drawn[i]!.depth - 1)?.name;
    expect(await send("obs-tree", secretChat("obs"))).toBe(200);
    // An exporter that retries a batch may deliver a span twice: count each span once.
    const byId = new Map((await traceOf("obs-tree")).map((s) => [s.spanId, s]));
    const spans = [...byId.values()];
    const checked = new Set<string>();
    drawn.forEach((d, i) => {
      for (const span of spans.filter((s) => s.name === d.name)) {
        expect(byId.get(span.parentSpanId)?.name, d.name).toBe(parentOf(i));
        checked.add(d.name);
      }
    });
    // The root, the dispatcher's span, decisions and attempts (queueing did not happen).
    expect([...checked]).toEqual(
      drawn.filter((d) => d.name !== "zml.queue.wait").map((d) => d.name),
    );
  });

  it("finds a request's log lines with its recipes, a successful one included", async () => {
    const requestId = "obs-logs";
    expect(await send(requestId, secretChat("obs"))).toBe(200);
    // The recipe: `logs --no-log-prefix <service> | jq -c 'select(.<field> == "<id>")'`.
    const recipe = /logs --no-log-prefix (\S+) \\\n\s+\| jq -c 'select\(\.(\w+) == /.exec(guide)!;
    const [, service, field] = recipe;
    expect(field).toBe("decision_id");
    const lines = () =>
      stack.services
        .get(service!)!
        .output()
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
    const line = await pollUntil(() => lines().find((l) => l.request_id === requestId), {
      timeoutMs: 5_000,
      message: `${service} log line of ${requestId}`,
    });
    const decisionId = line.decision_id as string;
    expect(decisionId).toMatch(/^[0-9a-f-]{36}$/);
    expect(lines().filter((l) => l[field!] === decisionId).length).toBeGreaterThan(0);
  });
});

describe("nothing secret leaves in logs or spans", () => {
  it("has neither the prompt nor the API key in any exported span or any service log", () => {
    const exported = otlp.rawBodies.join("\n");
    const logs = stack.logs();
    expect(exported.length).toBeGreaterThan(0);
    expect(logs.length).toBeGreaterThan(0);
    for (const secret of [SECRET_PROMPT, "zebra-violet", API_KEY]) {
      expect(exported.includes(secret), `span export contains ${secret}`).toBe(false);
      expect(logs.includes(secret), `logs contain ${secret}`).toBe(false);
    }
    // Every log line is JSON with trace correlation where a request is involved.
    const lines = logs.split("\n").filter((l) => l.startsWith("{"));
    const completed = lines
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.msg === "request completed");
    expect(completed.length).toBeGreaterThan(0);
    for (const l of completed) {
      expect(l.trace_id).toMatch(/^[0-9a-f]{32}$/);
      expect(l.span_id).toMatch(/^[0-9a-f]{16}$/);
    }
    expect(completed.some((l) => typeof l.decision_id === "string")).toBe(true);
  });
});

describe("metrics", () => {
  it("every service serves valid Prometheus text with the series an SRE needs", async () => {
    const opsUrls = new Map<string, string>();
    for (const [name, proc] of stack.services) {
      const match = /"ops":"(http:\/\/[^"]+)"/.exec(proc.output());
      if (match) opsUrls.set(name, match[1]!);
    }
    opsUrls.set("intake", stack.intakeUrl);
    const expected: Record<string, string[]> = {
      intake: [
        "zml_intake_requests_total",
        "zml_intake_request_duration_seconds",
        "zml_intake_added_latency_seconds",
      ],
      dispatcher: [
        "zml_dispatcher_decisions_total",
        "zml_dispatcher_attempts_total",
        "zml_dispatcher_retries_total",
        "zml_dispatcher_cooldowns_total",
        "zml_dispatcher_saturation_total",
        "zml_batch_jobs_running",
      ],
      "health-aggregator": ["zml_node_state", "zml_node_queue_depth"],
      attestation: [],
    };
    for (const [service, series] of Object.entries(expected)) {
      const url = opsUrls.get(service);
      expect(url, `${service} ops url`).toBeDefined();
      const text = await (await request(`${url}/metrics`)).body.text();
      // Throws, naming the line, on anything that is not the exposition format.
      const { families } = parsePrometheusText(text);
      for (const name of series) {
        expect(families.get(name)?.samples.length, `${service} exports ${name}`).toBeGreaterThan(0);
      }
      expect(families.get("process_cpu_seconds_total")?.samples.length).toBeGreaterThan(0);
    }
  });
});
