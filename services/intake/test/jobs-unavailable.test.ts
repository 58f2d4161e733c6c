import { ensureBusResources } from "@zml/bus";
import { startNatsCluster } from "@zml/harness";
import type { NatsClusterHandle } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, auth, errorOf, startIntake } from "./helpers.ts";
import type { Harness } from "./helpers.ts";

const job = (id: string) =>
  JSON.stringify({
    job_id: id,
    request: { model: "m1", messages: [{ role: "user", content: "hi" }] },
  });

// JetStream without a quorum: the connection to the surviving server stays up, but no
// stream has a leader, exactly as in the seconds after a server of a cluster is lost.
describe("job submission while JetStream is unavailable", { timeout: 120_000 }, () => {
  let cluster: NatsClusterHandle;
  let h: Harness;
  beforeAll(async () => {
    cluster = await startNatsCluster({ env: { PATH: process.env.PATH } });
    h = await startIntake({ cluster });
    await ensureBusResources(h.bus);
  }, 90_000);
  afterAll(async () => {
    await h?.close();
    await cluster?.stop();
  });

  const submit = (id: string) =>
    fetch(`${h.url}/v1/jobs`, { method: "POST", headers: auth(API_KEY), body: job(id) });

  it("answers a retryable 503 with Retry-After (never 500), then 202 once JetStream is back", async () => {
    expect((await submit("before-loss")).status).toBe(202);

    // Two of three away: intake stays connected (to the one left), JetStream has no quorum.
    const survivors = cluster.servers.slice(1);
    await Promise.all(survivors.map((s) => s.kill()));
    const res = await submit("during-loss");
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("2");
    expect(errorOf(await res.text())).toMatchObject({ code: "bus_unavailable", param: null });

    // A lookup may still be served (KV direct gets answer from any replica, leader or not);
    // if it is not, it is a retryable 503 too, never a 500.
    const lookup = await fetch(`${h.url}/v1/jobs/before-loss`, { headers: auth(API_KEY) });
    expect([200, 503]).toContain(lookup.status);
    if (lookup.status === 503) expect(lookup.headers.get("retry-after")).toBe("2");
    await lookup.body?.cancel();

    await Promise.all(survivors.map((s) => s.start()));
    await cluster.waitHealthy();
    // The same job id again: accepted once, however many times it was tried.
    let accepted: Response | undefined;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      const retry = await submit("during-loss");
      if (retry.status === 202) {
        accepted = retry;
        break;
      }
      expect(retry.status).toBe(503);
      await retry.body?.cancel();
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(accepted?.status).toBe(202);
    expect(await accepted!.json()).toMatchObject({ job_id: "during-loss", status: "queued" });
  });
});
