import { Counter } from "prom-client";
import { describe, expect, it } from "vitest";
import { createMetrics, withAttemptRegistry } from "../src/index.ts";

describe("withAttemptRegistry", () => {
  it("keeps the metrics of the attempt that succeeded, once, with the service label", async () => {
    const { registry } = createMetrics({ service: "svc" });
    const start = (fail: boolean) =>
      withAttemptRegistry(registry, (attempt) => {
        const c = new Counter({ name: "zml_test_total", help: "t", registers: [attempt] });
        if (fail) return Promise.reject(new Error("JetStream away"));
        c.inc(2);
        return Promise.resolve("started");
      });
    await expect(start(true)).rejects.toThrow("JetStream away");
    expect(registry.getSingleMetric("zml_test_total")).toBeUndefined();
    expect(await start(false)).toBe("started");
    expect(await registry.metrics()).toContain('zml_test_total{service="svc"} 2');
  });
});
