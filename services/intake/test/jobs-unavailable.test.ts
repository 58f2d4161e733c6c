import { ensureBusResources } from "@zml/bus";
import { JOB_STREAMS } from "@zml/contracts";
import { startNatsCluster } from "@zml/harness";
import type { NatsClusterHandle } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, auth, errorOf, startIntake } from "./helpers.ts";
import type { Harness } from "./helpers.ts";

/** A stream's leader as a server's monitoring endpoint reports it. */
async function streamLeader(cluster: NatsClusterHandle, stream: string): Promise<string> {
  const server = cluster.servers.find((s) => s.isRunning())!;
  const jsz = (await (await fetch(`${server.monitorUrl}/jsz?streams=true`)).json()) as {
    account_details?: Array<{
      stream_detail?: Array<{ name: string; cluster?: { leader?: string } }>;
    }>;
  };
  const found = (jsz.account_details ?? [])
    .flatMap((a) => a.stream_detail ?? [])
    .find((s) => s.name === stream)?.cluster?.leader;
  if (!found) throw new Error(`no leader reported for ${stream}`);
  return found;
}

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
    const startedAt = Date.now();
    const res = await submit("during-loss");
    expect(res.status).toBe(503);
    // Tried again for the submission's time (2 s here) before giving up.
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(1_500);
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

  it("rides out the election of a new leader for the jobs stream: the submission waits and is accepted", async () => {
    const patient = await startIntake({ cluster, config: { ZML_JOB_SUBMIT_TIMEOUT_MS: 15_000 } });
    try {
      const leaderName = await streamLeader(cluster, JOB_STREAMS.jobs);
      const leader = cluster.servers.find((s) => s.name === leaderName)!;
      await leader.kill();
      const startedAt = Date.now();
      const res = await fetch(`${patient.url}/v1/jobs`, {
        method: "POST",
        headers: auth(API_KEY),
        body: job("during-election"),
      });
      const tookMs = Date.now() - startedAt;
      expect(res.status, await res.text()).toBe(202);
      // Accepted once the new leader was there, in a few seconds, not at once.
      expect(tookMs).toBeLessThan(15_000);
      await leader.start();
    } finally {
      await patient.close();
    }
  });
});
