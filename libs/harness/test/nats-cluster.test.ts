import { existsSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pollUntil, startNatsCluster } from "../src/index.ts";
import type { NatsClusterHandle } from "../src/index.ts";
import { readInfoLine } from "./raw-nats.ts";

interface Jsz {
  meta_cluster?: { name?: string; leader?: string; cluster_size?: number };
}

async function monitor<T>(url: string): Promise<T> {
  const res = await fetch(url, { signal: AbortSignal.timeout(3000) });
  return (await res.json()) as T;
}

describe("startNatsCluster", { timeout: 90_000 }, () => {
  let cluster: NatsClusterHandle;
  beforeAll(async () => {
    cluster = await startNatsCluster({ env: { PATH: process.env.PATH } });
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  it("starts three routed servers with clustered JetStream and one meta leader", async () => {
    expect(cluster.servers.map((s) => s.name)).toEqual(["n1", "n2", "n3"]);
    expect(cluster.url.split(",")).toEqual(cluster.servers.map((s) => s.url));
    expect(new Set(cluster.servers.map((s) => s.port)).size).toBe(3);
    for (const server of cluster.servers) {
      const varz = await monitor<{ server_name: string; port: number }>(
        `${server.monitorUrl}/varz`,
      );
      expect(varz).toMatchObject({ server_name: server.name, port: server.port });
      const jsz = await monitor<Jsz>(`${server.monitorUrl}/jsz`);
      expect(jsz.meta_cluster).toMatchObject({ name: "zml", cluster_size: 3 });
      expect(["n1", "n2", "n3"]).toContain(jsz.meta_cluster?.leader);
      const routez = await monitor<{ num_routes: number }>(`${server.monitorUrl}/routez`);
      expect(routez.num_routes).toBe(2);
    }
  });

  it("is secured as a single server is: TLS and nkey auth required on every member", async () => {
    expect(cluster.secure).toBe(true);
    for (const server of cluster.servers) {
      const info = JSON.parse((await readInfoLine("127.0.0.1", server.port)).slice(5)) as Record<
        string,
        unknown
      >;
      expect(info).toMatchObject({ tls_required: true, auth_required: true, jetstream: true });
    }
    const env = cluster.serviceEnv("dispatcher");
    expect(env.NATS_URL).toBe(cluster.url);
    expect(existsSync(env.NATS_NKEY_SEED_FILE!)).toBe(true);
    expect(existsSync(env.NATS_CA_FILE!)).toBe(true);
  });

  it("kills one member, keeps a meta leader on the other two, and brings it back on the same port", async () => {
    const victim = cluster.servers[0]!;
    await victim.kill();
    expect(victim.isRunning()).toBe(false);
    const others = cluster.servers.slice(1);
    // Two of three is a quorum: a meta leader exists (re-elected if the victim led).
    await pollUntil(
      async () => {
        const jsz = await monitor<Jsz>(`${others[0]!.monitorUrl}/jsz`);
        const leader = jsz.meta_cluster?.leader;
        return leader !== undefined && leader !== "" && leader !== victim.name;
      },
      { timeoutMs: 30_000, intervalMs: 200, message: "a meta leader among the survivors" },
    );
    await expect(readInfoLine("127.0.0.1", victim.port)).rejects.toThrow();

    await victim.start();
    expect(victim.isRunning()).toBe(true);
    const routez = await monitor<{ num_routes: number }>(`${victim.monitorUrl}/routez`);
    expect(routez.num_routes).toBe(2);
    const jsz = await monitor<Jsz>(`${victim.monitorUrl}/jsz`);
    expect(jsz.meta_cluster?.cluster_size).toBe(3);
  });
});
