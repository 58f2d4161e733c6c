import { createHash } from "node:crypto";
import { createClient, ZmlApiError } from "@zml/client";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { submitJob } from "../support/jobs.ts";
import { API_KEY, MODEL, authHeaders, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

let stack: Stack;

async function expectNoJob(zml: ReturnType<typeof createClient>): Promise<void> {
  await expect(zml.jobs.get("shared-id-1")).rejects.toMatchObject({
    status: 404,
    code: "not_found",
  });
}
const client = () => createClient({ baseUrl: stack.intakeUrl, apiKey: API_KEY });
const ask = (content: string) => ({ model: MODEL, messages: [{ role: "user", content }] });

beforeAll(async () => {
  stack = await startActiveStack({
    nodes: [
      { nodeId: "ja-1", family: "H100", maxConcurrency: 4 },
      { nodeId: "ja-2", family: "MI300X", maxConcurrency: 4 },
    ],
  });
});
afterAll(() => stack?.stop());

describe("batch jobs through the API and the SDK", () => {
  it("submits many jobs and yields every result as it finishes", async () => {
    const zml = client();
    const receipts = await zml.jobs.submitMany(
      Array.from({ length: 20 }, (_, i) => ask(`job ${i}`)),
    );
    expect(receipts.every((r) => r.status === "queued" && !r.duplicate)).toBe(true);
    const seen = new Set<string>();
    for await (const job of zml.jobs.results(
      receipts.map((r) => r.job_id),
      { pollMs: 100 },
    )) {
      expect(job.status).toBe("done");
      expect(job.result?.http_status).toBe(200);
      expect((job.result?.body as { object: string }).object).toBe("chat.completion");
      expect(["ja-1", "ja-2"]).toContain(job.result?.routing?.node);
      seen.add(job.job_id);
    }
    expect(seen.size).toBe(20);
  });

  it("treats a repeated job id as the same job", async () => {
    const zml = client();
    const first = await zml.jobs.submit(ask("once"), { jobId: "api-dup-1" });
    const second = await zml.jobs.submit(ask("once"), { jobId: "api-dup-1" });
    expect([first.duplicate, second.duplicate]).toEqual([false, true]);
    for await (const job of zml.jobs.results(["api-dup-1"], { pollMs: 100 })) {
      expect(job.status).toBe("done");
    }
  });

  it("shows a job published directly to JetStream, and hides other accounts' jobs", async () => {
    await submitJob(stack.bus, "e2e", "direct-1", MODEL);
    const zml = client();
    for await (const job of zml.jobs.results(["direct-1"], { pollMs: 100 })) {
      expect(job.result?.outcome).toBe("done");
    }
    const other = { id: "other-acct", api_key_sha256: [], allowed_tiers: [1] };
    await stack.apply({ ...stack.fleet, accounts: [...stack.fleet.accounts, other] });
    await submitJob(stack.bus, "other-acct", "theirs-1", MODEL);
    await expect(zml.jobs.get("theirs-1")).rejects.toMatchObject({
      status: 404,
      code: "not_found",
    });
  });

  it("keeps jobs apart by account: the same id in two accounts is two jobs", async () => {
    const otherKey = "e2e-second-account-key-0123456789";
    const second = {
      id: "second-acct",
      api_key_sha256: [createHash("sha256").update(otherKey).digest("hex")],
      allowed_tiers: [1],
    };
    await stack.apply({
      ...stack.fleet,
      accounts: [...stack.fleet.accounts.filter((a) => a.id !== second.id), second],
    });
    const mine = client();
    const theirs = createClient({ baseUrl: stack.intakeUrl, apiKey: otherKey });
    const payloads = () =>
      [...stack.sims.values()].reduce((n, s) => n + s.stats().payloads_received, 0);

    const a = await mine.jobs.submit(ask("account A's question"), { jobId: "shared-id-1" });
    for await (const job of mine.jobs.results(["shared-id-1"], { pollMs: 100 })) {
      expect(job.status).toBe("done");
    }
    // Another account's id is "not found" to the second account, never a duplicate.
    await expectNoJob(theirs);
    const before = payloads();
    const b = await theirs.jobs.submit(ask("account B's question"), { jobId: "shared-id-1" });
    expect([a.duplicate, b.duplicate]).toEqual([false, false]);
    for await (const job of theirs.jobs.results(["shared-id-1"], { pollMs: 100 })) {
      expect(job.status).toBe("done");
    }
    expect(payloads()).toBe(before + 1);
    expect((await mine.jobs.get("shared-id-1")).status).toBe("done");
  });

  it.each([
    [{ request: { messages: [{ role: "user", content: "x" }] } }, 400, "model"],
    [{ request: { model: "nope", messages: [{ role: "user", content: "x" }] } }, 404, "model"],
    [{ job_id: "bad id!", request: ask("x") }, 400, "job_id"],
    [{ request: { ...ask("x"), stream: true } }, 400, "request.stream"],
    [{ request: ask("x"), extra: 1 }, 400, "extra"],
  ])("rejects a bad job %# with the field named", async (body, status, param) => {
    const res = await request(`${stack.intakeUrl}/v1/jobs`, {
      method: "POST",
      headers: authHeaders(),
      body: JSON.stringify(body),
    });
    expect(res.statusCode).toBe(status);
    expect(((await res.body.json()) as { error: { param: string } }).error.param).toBe(param);
  });

  it("answers 404 for an unknown job and 401 without a key", async () => {
    const err = await client()
      .jobs.get("no-such-job")
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ZmlApiError);
    expect(err).toMatchObject({ status: 404, code: "not_found" });
    const res = await request(`${stack.intakeUrl}/v1/jobs/no-such-job`);
    expect(res.statusCode).toBe(401);
    await res.body.dump();
  });
});
