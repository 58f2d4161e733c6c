import { describe, expect, it } from "vitest";
import { pollUntil, PollTimeoutError } from "../src/index.ts";

describe("pollUntil", () => {
  it("resolves with the first truthy value, treating throws and falsy values as not yet", async () => {
    let calls = 0;
    const value = await pollUntil<{ port: number }>(
      () => {
        calls += 1;
        if (calls === 1) throw new Error("not listening");
        if (calls === 2) return null;
        if (calls === 3) return Promise.resolve(false);
        return { port: 4222 };
      },
      { intervalMs: 1 },
    );
    expect(value).toEqual({ port: 4222 });
    expect(calls).toBe(4);
  });

  it("rejects on timeout with the message and the probe's last error", async () => {
    const error = await pollUntil(
      () => {
        throw new Error("ECONNREFUSED 127.0.0.1:4222");
      },
      { timeoutMs: 100, intervalMs: 5, message: "nats to accept connections" },
    ).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(PollTimeoutError);
    const timeout = error as PollTimeoutError;
    expect(timeout.code).toBe("poll_timeout");
    expect(timeout.message).toContain("nats to accept connections");
    expect(timeout.message).toContain("ECONNREFUSED 127.0.0.1:4222");
    expect((timeout.lastError as Error).message).toBe("ECONNREFUSED 127.0.0.1:4222");
  });

  it("reports no last error when the probe only returned falsy values", async () => {
    const error = (await pollUntil(() => undefined, { timeoutMs: 50 }).catch(
      (e: unknown) => e,
    )) as PollTimeoutError;
    expect(error).toBeInstanceOf(PollTimeoutError);
    expect(error.lastError).toBeUndefined();
    expect(error.message).not.toContain("last error");
  });

  it("keeps its deadline when a probe never settles", async () => {
    const hung = pollUntil(() => new Promise<boolean>(() => undefined), { timeoutMs: 100 });
    await expect(hung).rejects.toBeInstanceOf(PollTimeoutError);
  });

  it("stops when its signal aborts", async () => {
    const controller = new AbortController();
    const polling = pollUntil(() => false, { timeoutMs: 60_000, signal: controller.signal });
    controller.abort(new Error("shutting down"));
    await expect(polling).rejects.toThrow("shutting down");
  });
});
