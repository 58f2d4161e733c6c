// The guarded connector on real sockets: allowed addresses connect, refused ones never do,
// whether given as a literal address or as a name that resolves to one.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { createNodeAddressPolicy } from "@zml/contracts";
import { Pool } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { guardedConnector } from "../src/index.ts";

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

async function get(origin: string, deny: string[]): Promise<string> {
  const policy = createNodeAddressPolicy({ allow: [], deny });
  const pool = new Pool(origin, { connect: guardedConnector(policy, { timeout: 1000 }) });
  try {
    const res = await pool.request({ path: "/", method: "GET" });
    return await res.body.text();
  } catch (err) {
    return (err as Error).message;
  } finally {
    await pool.destroy();
  }
}

describe("guardedConnector", () => {
  it("connects to an allowed address, by literal and by name", async () => {
    expect(await get(`http://127.0.0.1:${port}`, [])).toBe("ok");
    expect(await get(`http://localhost:${port}`, [])).toBe("ok");
  });

  it("refuses a denied address before connecting, by literal and after DNS", async () => {
    const before = hits;
    expect(await get(`http://127.0.0.1:${port}`, ["127.0.0.0/8"])).toMatch(/node address refused/);
    expect(await get(`http://localhost:${port}`, ["127.0.0.0/8", "::1/128"])).toMatch(
      /node address refused/,
    );
    expect(hits).toBe(before);
  });
});
