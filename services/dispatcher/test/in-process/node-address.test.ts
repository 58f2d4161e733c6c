// The node address policy at connect time, in a dispatcher started in-process: a node whose
// name passed registration (it is no address) but resolves to the gateway's own host is
// refused after DNS, counted by rule, and sent nothing; with the operator's loopback
// allowance the same node is served. The resolver is the dispatcher's port, answering
// `node.example.test` with 127.0.0.1 where the sim listens.
import type { HostResolver } from "@zml/runtime";
import { afterEach, describe, expect, it } from "vitest";
import { startRig } from "./dispatcher-rig.ts";
import type { Rig } from "./dispatcher-rig.ts";

let rig: Rig | undefined;
afterEach(async () => {
  await rig?.stop();
  rig = undefined;
});

const lookups: string[] = [];
const resolveHost: HostResolver = (hostname) => {
  lookups.push(hostname);
  return hostname === "node.example.test"
    ? Promise.resolve([{ address: "127.0.0.1", family: 4 }])
    : Promise.reject(Object.assign(new Error(`ENOTFOUND ${hostname}`), { code: "ENOTFOUND" }));
};

const named = (allowLoopback: boolean) =>
  startRig({
    nodes: [{ id: "h1", family: "H100", host: "node.example.test" }],
    resolveHost,
    env: { ZML_NODE_ALLOW_LOOPBACK: String(allowLoopback) },
  });

describe("dispatcher in process: node addresses after DNS", () => {
  it("refuses a name that resolves to loopback: nothing sent, counted by rule", async () => {
    lookups.length = 0;
    rig = await named(false);
    const answer = await rig.send();
    expect(answer.error?.code).toBe("upstream_unavailable");
    // The client learns that the node failed, not where the operator's node points.
    expect(answer.error?.message).not.toContain("127.0.0.1");
    expect(rig.payloads()).toEqual({ h1: 0 });
    expect(lookups).toContain("node.example.test");
    expect(await rig.metrics()).toMatch(
      /zml_dispatcher_node_address_refusals_total\{node="h1",rule="node_address_loopback"\} 1\b/,
    );
  });

  it("serves the same node when the operator allows loopback", async () => {
    rig = await named(true);
    const answer = await rig.send();
    expect(answer.status).toBe(200);
    expect(answer.routing?.node).toBe("h1");
    expect(rig.payloads()).toEqual({ h1: 1 });
    expect(await rig.metrics()).not.toMatch(/zml_dispatcher_node_address_refusals_total\{/);
  });
});
