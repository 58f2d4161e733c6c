import { describe, expect, it } from "vitest";
import { CustomHealthSchema, MetricsReadError, readCustomHealth } from "../src/index.ts";

function readError(json: unknown): MetricsReadError {
  try {
    readCustomHealth(json);
  } catch (error) {
    expect(error).toBeInstanceOf(MetricsReadError);
    return error as MetricsReadError;
  }
  throw new Error("expected a MetricsReadError");
}

describe("readCustomHealth", () => {
  it("reads a full document", () => {
    expect(
      readCustomHealth({
        status: "ok",
        queue_depth: 7,
        running: 4,
        waiting: 3,
        kv_cache_usage: 0.42,
        free_memory_gib: 11.5,
        prompt_tokens_total: 9000,
        generation_tokens_total: 123456,
        instance_id: "pod-7f9c",
        vendor_extra: { anything: true },
      }),
    ).toEqual({
      healthy: true,
      status: "ok",
      running: 4,
      waiting: 3,
      queueDepth: 7,
      kvCacheUsage: 0.42,
      freeMemoryGib: 11.5,
      promptTokensTotal: 9000,
      generationTokensTotal: 123456,
      tokenLatency: null,
      instanceId: "pod-7f9c",
      prefixCache: null,
      prefill: null,
      kvCacheCapacityTokens: null,
      servedModels: null,
      slots: null,
    });
  });

  it("reads a minimal document, counting the whole queue as running", () => {
    expect(readCustomHealth({ status: "ok", queue_depth: 5 })).toEqual({
      healthy: true,
      status: "ok",
      running: 5,
      waiting: 0,
      queueDepth: 5,
      kvCacheUsage: null,
      freeMemoryGib: null,
      promptTokensTotal: null,
      generationTokensTotal: null,
      tokenLatency: null,
      instanceId: null,
      prefixCache: null,
      prefill: null,
      kvCacheCapacityTokens: null,
      servedModels: null,
      slots: null,
    });
  });

  it("derives the missing half of the running/waiting split", () => {
    expect(readCustomHealth({ status: "ok", queue_depth: 5, waiting: 2 })).toMatchObject({
      running: 3,
      waiting: 2,
    });
    expect(readCustomHealth({ status: "ok", queue_depth: 5, running: 1 })).toMatchObject({
      running: 1,
      waiting: 4,
    });
  });

  it("reports degraded and down servers as unhealthy", () => {
    expect(readCustomHealth({ status: "degraded", queue_depth: 1 })).toMatchObject({
      healthy: false,
      status: "degraded",
    });
    expect(readCustomHealth({ status: "down", queue_depth: 0 }).healthy).toBe(false);
  });

  it("rejects a split that does not add up to queue_depth", () => {
    const error = readError({ status: "ok", queue_depth: 5, running: 4, waiting: 3 });
    expect(error.code).toBe("metrics_unreadable");
    expect(error.missing).toEqual(["queue_depth"]);
  });

  it("names every offending field", () => {
    const error = readError({ status: "fine", queue_depth: -1, kv_cache_usage: 1.5 });
    expect(error.missing).toEqual(["status", "queue_depth", "kv_cache_usage"]);
    expect(error.message).toContain("kv_cache_usage");
  });

  it.each([null, "ok", 42, [], {}])("rejects %j", (json) => {
    expect(readError(json).code).toBe("metrics_unreadable");
  });

  it("exposes the schema for servers that produce the document", () => {
    expect(CustomHealthSchema.safeParse({ status: "ok", queue_depth: 0 }).success).toBe(true);
  });
});
