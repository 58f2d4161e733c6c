// A tier-4 prompt and answer never exist in clear in the gateway. One attested tier-4 node: a
// simulated vLLM whose answers carry a random marker, behind the TD proxy running as its own
// process. Clients put another random marker in their prompts — the TypeScript SDK, the
// official `openai` SDK through `zml seal-proxy`, and the Python SDK — plain and streamed. Then
// neither marker may be found in the memory of intake, the dispatcher, the other services or
// nats-server, in their debug logs, or in any message on the bus; the same search finds both
// in the TD proxy's memory, so a search that finds nothing means something.
import { randomBytes } from "node:crypto";
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { natsConnectionOf } from "@zml/bus";
import { createClient } from "@zml/client";
import type { NodeSpec } from "@zml/contracts";
import { pollUntil, repoRoot, startProcess } from "@zml/harness";
import type { ManagedProcess } from "@zml/harness";
import { loadTestTeeMaterial, startSimNode } from "@zml/node-sim";
import type { SimNode } from "@zml/node-sim";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chat, postChat } from "../support/http.ts";
import { findInProcessMemory, pidsWhere } from "../support/process-memory.ts";
import { startSealProxy } from "../support/seal-proxy.ts";
import { API_KEY, MODEL, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import { approveMeasurements, MRTD, RTMR3, waitForResult } from "./attestation-fixtures.ts";

const run = promisify(execFile);
const root = repoRoot();
const PROMPT_MARKER = `zmlprompt${randomBytes(12).toString("hex")}`;
const ANSWER_MARKER = `zmlanswer${randomBytes(12).toString("hex")}`;
const NODE = "t4-secret";
const prompt = [{ role: "user" as const, content: `Keep this to yourself: ${PROMPT_MARKER}` }];

let teeDir: string;
let rootPemFile: string;
let backend: SimNode;
let tdProxy: ManagedProcess;
let sealProxy: ManagedProcess | undefined;
let stack: Stack;
const busMessages: string[] = [];

beforeAll(async () => {
  teeDir = await mkdtemp(join(tmpdir(), "zml-sealed-e2e-"));
  rootPemFile = (await loadTestTeeMaterial(teeDir)).rootPemFile;
  backend = await startSimNode({
    nodeId: NODE,
    flavour: "vllm",
    models: [MODEL],
    reply: `${ANSWER_MARKER} is the answer`,
    completionTokens: 6,
  });
  tdProxy = await startProcess({
    name: "td-proxy",
    command: process.execPath,
    args: [
      join(root, "libs/td-proxy/src/main.ts"),
      ...["--backend", backend.url, "--listen", "127.0.0.1:0", "--log-level", "debug"],
      ...["--quote-source", "simulated", "--sim-tee-dir", teeDir, "--mrtd", MRTD, "--rtmr3", RTMR3],
    ],
    readyLine: /"msg":"td proxy ready"/,
  });
  const ready = await tdProxy.waitForOutput(/^\{.*"msg":"td proxy ready".*\}$/);
  const tdUrl = (JSON.parse(ready[0]) as { url: string }).url;

  stack = await startStack({
    nodes: [{ nodeId: "t1-plain", family: "H100" }],
    allowedTiers: [1, 4],
    env: { ATTESTATION_TRUST_ROOT_PEM_FILE: rootPemFile, LOG_LEVEL: "debug" },
    seed: (bus) => approveMeasurements(bus, [{ id: "llama-t4", mrtd: MRTD, tier: 4 }]),
  });
  const tier4: NodeSpec = {
    ...stack.fleet.nodes[0]!,
    id: NODE,
    endpoint: tdUrl,
    tier: 4,
    accelerator_family: "H100",
    registered_at: 1,
  };
  await stack.apply({ ...stack.fleet, nodes: [...stack.fleet.nodes, tier4] });
  await waitForStatus(stack, "Active", [NODE]);
  await waitForResult(stack, NODE, (r) => r.ok, "attested");
  // Everything on the bus from here on, headers and payloads, as text.
  natsConnectionOf(stack.bus).subscribe(">", {
    callback: (_err, msg) => {
      const h = msg.headers;
      const headers = h ? h.keys().map((k) => `${k}: ${h.values(k).join(",")}`) : [];
      busMessages.push(`${msg.subject}\n${headers.join("\n")}\n${msg.string()}`);
    },
  });
});

afterAll(async () => {
  await sealProxy?.stop("SIGTERM", 3_000);
  await stack?.stop();
  await tdProxy?.stop("SIGTERM", 3_000);
  await backend?.close();
  await rm(teeDir, { recursive: true, force: true });
});

describe("a tier-4 prompt and answer", () => {
  it("reach the client intact through the TypeScript SDK, plain and streamed", async () => {
    const client = createClient({ baseUrl: stack.intakeUrl, apiKey: API_KEY, timeoutMs: 20_000 });
    const session = await client.sessions.create({
      model: MODEL,
      trustedRootPem: await import("node:fs/promises").then((fs) =>
        fs.readFile(rootPemFile, "utf8"),
      ),
      approvedMeasurements: [{ mrtd: MRTD, rtmr3: RTMR3 }],
    });
    const answer = await session.chat({ messages: prompt });
    expect(answer.routing).toMatchObject({ node: NODE, tier: 4 });
    expect(answer.choices[0]!.message.content).toContain(ANSWER_MARKER);
    let text = "";
    for await (const chunk of await session.chat({ messages: prompt, stream: true })) {
      text += chunk.choices[0]?.delta.content ?? "";
    }
    expect(text).toContain(ANSWER_MARKER);
    await session.close();
  });

  it("reach the official openai SDK intact through zml seal-proxy, plain and streamed", async () => {
    const proxy = await startSealProxy({
      gateway: stack.intakeUrl,
      apiKey: API_KEY,
      model: MODEL,
      rootPemFile,
      mrtd: MRTD,
    });
    sealProxy = proxy.process;
    const baseURL = proxy.baseUrl;
    const openai = new OpenAI({ baseURL, apiKey: "not-needed-locally" });
    const { data, response } = await openai.chat.completions
      .create({ model: MODEL, messages: prompt })
      .withResponse();
    expect(data.choices[0]!.message.content).toContain(ANSWER_MARKER);
    expect(response.headers.get("x-zml-routing")).toContain(`node="${NODE}"`);
    let text = "";
    for await (const chunk of await openai.chat.completions.create({
      model: MODEL,
      messages: prompt,
      stream: true,
    })) {
      text += chunk.choices[0]?.delta.content ?? "";
    }
    expect(text).toContain(ANSWER_MARKER);
  });

  it("reach the Python SDK intact, plain and streamed", async () => {
    const script = `
import json, sys, zml
client = zml.ZML(base_url=sys.argv[1], api_key=sys.argv[2], timeout=30)
root = open(sys.argv[3]).read()
with client.sessions.create(sys.argv[4], trusted_root_pem=root,
                            approved_measurements=[{"mrtd": sys.argv[5]}]) as session:
    messages = [{"role": "user", "content": "Keep this to yourself: " + sys.argv[6]}]
    whole = session.chat.completions.create(messages=messages).choices[0].message.content
    with session.chat.completions.create(messages=messages, stream=True) as stream:
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
print(json.dumps({"whole": whole, "streamed": streamed, "node": session.node_id}))
`;
    const { stdout } = await run(
      "/usr/bin/python3",
      ["-c", script, stack.intakeUrl, API_KEY, rootPemFile, MODEL, MRTD, PROMPT_MARKER],
      { env: { ...process.env, PYTHONPATH: join(root, "libs/python-sdk/src") } },
    );
    const out = JSON.parse(stdout) as { whole: string; streamed: string; node: string };
    expect(out.node).toBe(NODE);
    expect(out.whole).toContain(ANSWER_MARKER);
    expect(out.streamed).toContain(ANSWER_MARKER);
  });

  it("were opened by the TD's server, and exist in clear in the TD proxy's memory", () => {
    // The node's own server saw the client's prompt (it is inside the TD).
    expect(backend.stats().payloads_received).toBeGreaterThanOrEqual(6);
    const found = findInProcessMemory(tdProxy.pid, [PROMPT_MARKER, ANSWER_MARKER]);
    expect([...found].sort()).toEqual([ANSWER_MARKER, PROMPT_MARKER].sort());
  });

  it("never exist in clear in a gateway process, its debug logs, or on the bus", async () => {
    const gateway = [...stack.services.values()].map((p) => ({ name: p.name, pid: p.pid }));
    const natsPids = pidsWhere(
      (argv) =>
        argv[0]?.endsWith("nats-server") === true &&
        argv.some((a) => a.endsWith(".conf") && stack.nats.storeDir.startsWith(dirname(a))),
    );
    expect(natsPids).toHaveLength(1);
    gateway.push({ name: "nats-server", pid: natsPids[0]! });
    expect(gateway.map((g) => g.name).sort()).toEqual(
      ["attestation", "dispatcher", "health-aggregator", "intake", "nats-server"].sort(),
    );
    for (const { name, pid } of gateway) {
      expect([...findInProcessMemory(pid, [PROMPT_MARKER, ANSWER_MARKER])], name).toEqual([]);
    }
    // The services log at debug: the dispatcher's line for a routed tier-1 request shows it.
    await waitForStatus(stack, "Active", ["t1-plain"]);
    const plain = await postChat(stack.intakeUrl, chat(MODEL));
    expect(plain.status, plain.text).toBe(200);
    await pollUntil(() => stack.logs().includes('"level":"debug"'), {
      timeoutMs: 10_000,
      message: "a debug line in the services' logs",
    });
    const logs = stack.logs();
    expect(logs).not.toContain(PROMPT_MARKER);
    expect(logs).not.toContain(ANSWER_MARKER);
    // The TD proxy holds them, but does not log them either.
    expect(tdProxy.output()).not.toContain(PROMPT_MARKER);
    expect(tdProxy.output()).not.toContain(ANSWER_MARKER);
    expect(busMessages.length).toBeGreaterThan(6);
    expect(busMessages.some((m) => m.includes("zml.route.request"))).toBe(true);
    expect(
      busMessages.filter((m) => m.includes(PROMPT_MARKER) || m.includes(ANSWER_MARKER)),
    ).toEqual([]);
  });
});
