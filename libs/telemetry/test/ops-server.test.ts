import { afterEach, describe, expect, it } from "vitest";
import { createLogger, createMetrics, startOpsServer } from "../src/index.ts";
import type { OpsServer } from "../src/index.ts";
import { captureStream } from "./capture.ts";

describe("startOpsServer", () => {
  let server: OpsServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  async function start(isReady: () => boolean): Promise<OpsServer> {
    const { registry } = createMetrics({ service: "attestation" });
    const log = createLogger({ service: "attestation", destination: captureStream() });
    server = await startOpsServer({ port: 0, registry, isReady, log });
    return server;
  }

  it("answers liveness, readiness and metrics over HTTP", async () => {
    let ready = false;
    const ops = await start(() => ready);
    expect(ops.port).toBeGreaterThan(0);
    expect(ops.url).toBe(`http://127.0.0.1:${ops.port}`);

    const health = await fetch(`${ops.url}/healthz`);
    expect(health.status).toBe(200);
    expect(health.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await health.json()).toEqual({ status: "ok" });

    const notReady = await fetch(`${ops.url}/readyz`);
    expect(notReady.status).toBe(503);
    expect(await notReady.json()).toEqual({ status: "not_ready" });
    ready = true;
    const isReady = await fetch(`${ops.url}/readyz`);
    expect(isReady.status).toBe(200);
    expect(await isReady.json()).toEqual({ status: "ready" });

    const metrics = await fetch(`${ops.url}/metrics`);
    expect(metrics.status).toBe(200);
    expect(metrics.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await metrics.text();
    expect(text).toMatch(/^# TYPE process_resident_memory_bytes gauge$/m);
    expect(text).toContain('service="attestation"');
  });

  it("treats a throwing readiness check as not ready", async () => {
    const ops = await start(() => {
      throw new Error("state table not loaded");
    });
    const res = await fetch(`${ops.url}/readyz`);
    expect(res.status).toBe(503);
  });

  it("returns JSON 404 for unknown paths and 405 for other methods", async () => {
    const ops = await start(() => true);
    const missing = await fetch(`${ops.url}/v1/chat/completions`);
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ status: "not_found" });

    const post = await fetch(`${ops.url}/healthz`, { method: "POST", body: "{}" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
  });

  it("frees the port on close, even with a keep-alive connection open", async () => {
    const ops = await start(() => true);
    const res = await fetch(`${ops.url}/healthz`);
    await res.text();
    await ops.close();
    server = undefined;
    await expect(fetch(`${ops.url}/healthz`)).rejects.toThrow();
  });
});
