import { register as globalRegistry } from "prom-client";
import { describe, expect, it } from "vitest";
import { Counter, createMetrics } from "../src/index.ts";

// A Prometheus text-format sample line: name, optional labels, value, optional timestamp.
// Values are parsed with Go's ParseFloat, which takes NaN/Inf in any case (prom-client
// writes an idle event-loop mean as "Nan").
const SAMPLE_LINE =
  /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? (-?[0-9.eE+-]+|nan|[+-]?inf)( -?\d+)?$/i;

describe("createMetrics", () => {
  it("collects process metrics with the service label, in valid text format", async () => {
    const { registry } = createMetrics({ service: "health-aggregator" });
    const text = await registry.metrics();

    expect(text).toMatch(/^# TYPE process_cpu_user_seconds_total counter$/m);
    expect(text).toMatch(/^# TYPE nodejs_heap_size_used_bytes gauge$/m);
    expect(text).toMatch(/^process_cpu_user_seconds_total\{service="health-aggregator"\} /m);
    const samples = text.split("\n").filter((line) => line !== "" && !line.startsWith("#"));
    expect(samples.length).toBeGreaterThan(10);
    for (const line of samples) expect(line).toMatch(SAMPLE_LINE);
  });

  it("uses its own registry, not prom-client's global one", async () => {
    const a = createMetrics({ service: "a" });
    const b = createMetrics({ service: "b" });
    const attempts = new Counter({
      name: "zml_test_attempts_total",
      help: "Attempts.",
      labelNames: ["outcome"],
      registers: [a.registry],
    });
    attempts.inc({ outcome: "ok" }, 2);

    expect(await a.registry.metrics()).toContain(
      'zml_test_attempts_total{outcome="ok",service="a"} 2',
    );
    expect(await b.registry.metrics()).not.toContain("zml_test_attempts_total");
    expect(await globalRegistry.metrics()).not.toContain("zml_test_attempts_total");
  });
});
