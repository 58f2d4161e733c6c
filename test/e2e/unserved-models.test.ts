// A node registered for a model its engine does not serve: vLLM would answer 404 and the
// client would pay for the operator's mistake. The health aggregator reads what each engine
// serves (its /v1/models), and routing keeps such a model away from that node.
import { openKv } from "@zml/bus";
import { KV_BUCKETS, NodeStateSchema } from "@zml/contracts";
import type { NodeState } from "@zml/contracts";
import { chainPolicy } from "@zml/contracts/testing";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postChat } from "../support/http.ts";
import { e2eFleet, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

let stack: Stack;

async function state(id: string): Promise<NodeState | undefined> {
  const e = await (await openKv(stack.bus, KV_BUCKETS.nodeState)).get(id);
  return e?.operation === "PUT" ? NodeStateSchema.parse(e.json()) : undefined;
}

beforeAll(async () => {
  // h100-a serves only `llama`, h100-b `llama` and `mistral`; h100-a is preferred.
  stack = await startActiveStack({
    nodes: [
      { nodeId: "h100-a", family: "H100", models: ["llama"] },
      { nodeId: "mi300x-b", family: "MI300X", models: ["llama", "mistral"] },
    ],
    fleet: {
      models: [
        { id: "llama", default_policy: "h100-first" },
        { id: "mistral", default_policy: "h100-first" },
      ],
      policies: [chainPolicy("h100-first", ["H100", "MI300X"])],
    },
  });
});

afterAll(async () => {
  await stack?.stop();
});

describe("a node registered for a model its engine does not serve", () => {
  it("is not routed that model, says so in its state, and still serves the rest", async () => {
    // The operator's mistake: h100-a registered for mistral too.
    const specs = stack.fleet.nodes.map((n) => ({ ...n, models: ["llama", "mistral"] }));
    await stack.apply(
      e2eFleet(specs, {
        models: [
          { id: "llama", default_policy: "h100-first" },
          { id: "mistral", default_policy: "h100-first" },
        ],
        policies: [chainPolicy("h100-first", ["H100", "MI300X"])],
      }),
    );
    const refused = await pollUntil(
      async () => {
        const s = await state("h100-a");
        return s && s.unserved_models.length > 0 ? s : undefined;
      },
      { timeoutMs: 15_000, message: "h100-a's unserved models" },
    );
    expect(refused).toMatchObject({
      status: "Active",
      served_models: ["llama"],
      unserved_models: ["mistral"],
    });

    const before = stack.sims.get("h100-a")!.stats().payloads_received;
    for (let i = 0; i < 5; i++) {
      const res = await postChat(stack.intakeUrl, {
        model: "mistral",
        messages: [{ role: "user", content: "hi" }],
      });
      expect(res.status).toBe(200);
      expect(res.routing).toMatchObject({ node: "mi300x-b", attempts: 1 });
    }
    // Not one mistral request reached h100-a (it would have answered 404).
    expect(stack.sims.get("h100-a")!.stats().payloads_received).toBe(before);
    const llama = await postChat(stack.intakeUrl, {
      model: "llama",
      messages: [{ role: "user", content: "hi" }],
    });
    expect(llama.routing).toMatchObject({ node: "h100-a", attempts: 1 });
  });
});
