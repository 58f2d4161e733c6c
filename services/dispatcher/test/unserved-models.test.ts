// A node registered for a model its engine refuses (vLLM's 404) is not offered that model.
import { NodeSpecSchema } from "@zml/contracts";
import type { NodeState } from "@zml/contracts";
import { activeNodeState, nodeSpec } from "@zml/contracts/testing";
import type { RoutingSnapshot } from "@zml/routing";
import { describe, expect, it } from "vitest";
import { createRoutingState } from "../src/fleet/routing-state.ts";

const spec = (id: string) =>
  NodeSpecSchema.parse(
    nodeSpec(id, { endpoint: `http://${id}.example:8000`, models: ["llama", "mistral"] }),
  );

/** The nodes a model's tier-1 bucket offers. */
function offered(snapshot: RoutingSnapshot, model: string): string[] {
  const bucket = snapshot.buckets.get(model)?.[1];
  if (bucket === undefined) return [];
  return [...bucket.families.values()].flatMap((f) => f.nodes.map((n) => n.spec.id));
}

describe("models a node's engine does not serve", () => {
  it("are withdrawn from the node, and offered again once its engine serves them", () => {
    const states = new Map<string, NodeState>();
    const routing = createRoutingState({
      nodes: new Map([
        ["a", spec("a")],
        ["b", spec("b")],
      ]),
      models: new Map(),
      policies: new Map(),
      costs: new Map(),
      quality: new Map(),
      states,
    });
    expect(offered(routing.current().snapshot, "mistral")).toEqual(["a", "b"]);

    const refusing = activeNodeState("a", 1, {
      served_models: ["llama"],
      unserved_models: ["mistral"],
    });
    states.set("a", refusing);
    routing.stateChanged("a", refusing);
    expect(offered(routing.current().snapshot, "mistral")).toEqual(["b"]);
    expect(offered(routing.current().snapshot, "llama")).toEqual(["a", "b"]);
    // Still Active for what it serves: its live state is applied.
    expect(routing.current().live.snapshot).toBe(routing.current().snapshot);

    const fixed = activeNodeState("a", 2, { served_models: ["llama", "mistral"] });
    states.set("a", fixed);
    routing.stateChanged("a", fixed);
    expect(offered(routing.current().snapshot, "mistral")).toEqual(["a", "b"]);
    routing.stop();
  });

  it("leave the snapshot alone when a state changes anything else", () => {
    const states = new Map<string, NodeState>();
    const routing = createRoutingState({
      nodes: new Map([["a", spec("a")]]),
      models: new Map(),
      policies: new Map(),
      costs: new Map(),
      quality: new Map(),
      states,
    });
    const before = routing.current().snapshot;
    const busier = activeNodeState("a", 1, { queue_depth: 3, running: 3 });
    states.set("a", busier);
    routing.stateChanged("a", busier);
    expect(routing.current().snapshot).toBe(before);
    routing.stop();
  });
});
