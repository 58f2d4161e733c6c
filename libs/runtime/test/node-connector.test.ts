// The guarded connector on real sockets: allowed addresses connect, refused ones never do,
// whether given as a literal address or as a name that resolves to one.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { createNodeAddressPolicy } from "@zml/contracts";
import type { NodeAddressRules } from "@zml/contracts";
import { Pool } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { guardedConnector, NodeAddressRefusedError } from "../src/index.ts";
import type { HostResolver } from "../src/index.ts";

let port: number;
let hits = 0;
const server = createServer((_req, res) => {
  hits++;
  res.end("ok");
});
beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => server.close());

/** A resolver with fixed answers: `node.example.test` is this test's server, on loopback. */
const fixed: HostResolver = (hostname) =>
  hostname === "node.example.test"
    ? Promise.resolve([{ address: "127.0.0.1", family: 4 }])
    : Promise.reject(Object.assign(new Error(`ENOTFOUND ${hostname}`), { code: "ENOTFOUND" }));

async function get(
  origin: string,
  rules: Partial<NodeAddressRules>,
  resolve?: HostResolver,
): Promise<string> {
  const policy = createNodeAddressPolicy({ allow: [], deny: [], ...rules });
  const pool = new Pool(origin, { connect: guardedConnector(policy, { timeout: 1000 }, resolve) });
  try {
    const res = await pool.request({ path: "/", method: "GET" });
    return await res.body.text();
  } catch (err) {
    return err instanceof NodeAddressRefusedError ? `${err.rule}: ${err.message}` : String(err);
  } finally {
    await pool.destroy();
  }
}

describe("guardedConnector", () => {
  it("connects to loopback, by literal and by name, only with the loopback allowance", async () => {
    const allowed = { allowLoopback: true };
    expect(await get(`http://127.0.0.1:${port}`, allowed)).toBe("ok");
    expect(await get(`http://localhost:${port}`, allowed)).toBe("ok");
    expect(await get(`http://node.example.test:${port}`, allowed, fixed)).toBe("ok");
    const before = hits;
    expect(await get(`http://127.0.0.1:${port}`, {})).toMatch(/^node_address_loopback: /);
    expect(await get(`http://localhost:${port}`, {})).toMatch(/^node_address_loopback: /);
    expect(hits).toBe(before);
  });

  it("refuses a name that resolves to loopback after DNS, naming the rule", async () => {
    const before = hits;
    expect(await get(`http://node.example.test:${port}`, {}, fixed)).toBe(
      "node_address_loopback: node address refused: 127.0.0.1 is a loopback address: the " +
        "gateway's own host is not a node (ZML_NODE_ALLOW_LOOPBACK=true allows it)",
    );
    expect(hits).toBe(before);
  });

  it("refuses a denied address before connecting, by literal and after DNS", async () => {
    const before = hits;
    const denied = { allowLoopback: true, deny: ["127.0.0.0/8"] };
    expect(await get(`http://127.0.0.1:${port}`, denied)).toMatch(/^node_address_denied: /);
    expect(await get(`http://node.example.test:${port}`, denied, fixed)).toMatch(
      /^node_address_denied: /,
    );
    expect(
      await get(`http://localhost:${port}`, { allowLoopback: true, deny: ["127.0.0.0/8", "::1"] }),
    ).toMatch(/^node_address_denied: /);
    expect(hits).toBe(before);
  });

  it("passes the resolver's own failure through as a network error", async () => {
    expect(await get(`http://unknown.example.test:${port}`, {}, fixed)).toMatch(/ENOTFOUND/);
  });
});
