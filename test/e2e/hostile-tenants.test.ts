// Hostile tenants and nodes against a whole stack (real processes, a node of our own): a
// node's HTML is never passed off as an answer nor sniffed, fresh-nonce attestations are
// rationed per account, and an address that keeps failing authentication is throttled. The
// throttle test runs last: it locks this test's address out of the stack.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostileNodeSpec, startHostileNode } from "../support/hostile-node.ts";
import type { HostileNode } from "../support/hostile-node.ts";
import { adminHeaders, authHeaders, MODEL, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import { approveMeasurements, MRTD, teeNode, waitForResult, pki } from "./attestation-fixtures.ts";

const HTML_MODEL = "html-model";
const MISSING_MODEL = "missing-model";
const HTML = "<html><script>document.title='owned'</script></html>";
let stack: Stack;
let hostile: HostileNode;
/** Answers 404 in HTML: a 4xx is the client's answer, relayed as it came. */
let missing: HostileNode;

beforeAll(async () => {
  hostile = await startHostileNode((_req, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(HTML);
  });
  missing = await startHostileNode((_req, res) =>
    res.writeHead(404, { "content-type": "text/html" }).end(HTML),
  );
  stack = await startStack({
    nodes: [teeNode("tee-good"), { nodeId: "h100-a", family: "H100" }],
    trustedRootPem: pki.root.pem,
    seed: (bus) => approveMeasurements(bus, [{ id: "llama-t3", mrtd: MRTD }]),
  });
  await stack.apply({
    ...stack.fleet,
    nodes: [
      ...stack.fleet.nodes,
      hostileNodeSpec("html-node", hostile, HTML_MODEL, 10),
      {
        ...hostileNodeSpec("missing-node", missing, MISSING_MODEL, 11),
        accelerator_family: "L4",
      },
    ],
    models: [...stack.fleet.models, { id: HTML_MODEL }, { id: MISSING_MODEL }],
  });
  await waitForStatus(stack, "Active", ["h100-a", "html-node", "missing-node"]);
});

afterAll(async () => {
  await stack?.stop();
  await hostile?.close();
  await missing?.close();
});

const get = (path: string, key?: string) =>
  fetch(`${stack.intakeUrl}${path}`, { headers: authHeaders(key) });

describe("a node's answer", () => {
  const ask = (model: string) =>
    fetch(`${stack.intakeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: authHeaders(),
      body: JSON.stringify({ model, messages: [{ role: "user", content: "x" }] }),
    });

  it("in HTML where JSON is due is never relayed: the client gets 502 bad_upstream_response", async () => {
    const res = await ask(HTML_MODEL);
    expect(res.status).toBe(502);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    const text = await res.text();
    expect(text).not.toContain("<script>");
    expect(JSON.parse(text)).toMatchObject({ error: { code: "bad_upstream_response" } });
    expect(hostile.received()).toBe(1);
  });

  it("is relayed as it came when it is a 4xx, but marked nosniff so a browser never runs it", async () => {
    const res = await ask(MISSING_MODEL);
    expect(res.status).toBe(404);
    expect(res.headers.get("content-type")).toBe("text/html");
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    expect(await res.text()).toContain("<script>");
    expect(missing.received()).toBe(1);
  });
});

describe("fresh-nonce attestation", () => {
  it("is rationed per account (429 naming nonce), while the cached result stays open", async () => {
    await waitForResult(stack, "tee-good", (r) => r.ok, "tee-good attested");
    const statuses: number[] = [];
    let limited: Response | undefined;
    for (let i = 0; i < 7 && !limited; i++) {
      const res = await get(`/v1/attestation/tee-good?nonce=${randomBytes(32).toString("hex")}`);
      statuses.push(res.status);
      if (res.status === 429) limited = res;
      else await res.arrayBuffer();
    }
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 429]);
    expect(Number(limited!.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    const body = (await limited!.json()) as { error: { code: string; param: string } };
    expect(body.error).toMatchObject({ code: "rate_limited", param: "nonce" });

    const cached = await get("/v1/attestation/tee-good");
    expect(cached.status).toBe(200);
    await cached.arrayBuffer();
  });
});

describe("node registration through the admin API", () => {
  it("refuses metadata, link-local and credential-carrying endpoints, naming endpoint", async () => {
    for (const endpoint of [
      "http://169.254.169.254/latest/meta-data/",
      "http://[fd00:ec2::254]/",
      "http://metadata.google.internal/computeMetadata/v1/",
      "https://operator:sk-live-secret@provider.example.com/v1",
    ]) {
      const res = await fetch(`${stack.intakeUrl}/admin/v1/nodes/ssrf-node`, {
        method: "PUT",
        headers: adminHeaders(),
        body: JSON.stringify({
          endpoint,
          framework: "vllm",
          accelerator_family: "H100",
          tier: 1,
          models: [MODEL],
        }),
      });
      const text = await res.text();
      expect(res.status, endpoint).toBe(400);
      expect((JSON.parse(text) as { error: { param: string } }).error.param).toBe("endpoint");
      expect(text).not.toContain("sk-live-secret");
    }
    const stored = await fetch(`${stack.intakeUrl}/admin/v1/nodes/ssrf-node`, {
      headers: adminHeaders(),
    });
    expect(stored.status).toBe(404);
    await stored.arrayBuffer();
  });
});

describe("failed authentication", () => {
  it("throttles an address after 20 wrong keys: 429 with Retry-After even for the right key", async () => {
    const before = stack.sims.get("h100-a")!.stats().payloads_received;
    const statuses = new Set<number>();
    for (let i = 0; i < 20; i++) {
      const res = await get("/v1/models", `wrong-${i}-${randomBytes(8).toString("hex")}`);
      statuses.add(res.status);
      await res.arrayBuffer();
    }
    expect([...statuses]).toEqual([401]);

    const res = await fetch(`${stack.intakeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: authHeaders(),
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "x" }] }),
    });
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    const body = (await res.json()) as { error: { code: string; param: string } };
    expect(body.error).toMatchObject({ code: "auth_throttled", param: "authorization" });
    expect(stack.sims.get("h100-a")!.stats().payloads_received).toBe(before);
    for (const [, proc] of stack.services) expect(proc.output()).not.toContain("FATAL");
  });
});
