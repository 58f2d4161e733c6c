import { describe, expect, it } from "vitest";
import { FleetDocumentSchema, PolicySpecSchema } from "../src/index.ts";

describe("fleet schemas", () => {
  it("accept the walkthrough's policy YAML shape verbatim", () => {
    const policy = PolicySpecSchema.parse({
      name: "interactive",
      accelerator_preference: [
        { family: "H100", priority: 1 },
        { family: "MI300X", priority: 2 },
      ],
      latency_target_ms: 2000,
      cost_priority: "latency",
    });
    expect(policy.queue_on_saturation).toBe(false);
    expect(policy.max_queue_ms).toBe(0);
    expect(policy.first_byte_timeout_ms).toBeUndefined();
  });

  it("a node's protocol is http1, h2 over https or h2c over http", async () => {
    const { NodeSpecSchema } = await import("../src/index.ts");
    const node = (endpoint: string, protocol?: string) => ({
      id: "n1",
      endpoint,
      framework: "vllm",
      accelerator_family: "H100",
      tier: 1,
      models: ["m"],
      ...(protocol === undefined ? {} : { protocol }),
    });
    expect(NodeSpecSchema.parse(node("http://10.0.0.5:8000")).protocol).toBeUndefined();
    expect(NodeSpecSchema.parse(node("https://10.0.0.5:8000", "h2")).protocol).toBe("h2");
    expect(NodeSpecSchema.parse(node("http://10.0.0.5:8000", "h2c")).protocol).toBe("h2c");
    for (const [endpoint, protocol] of [
      ["http://10.0.0.5:8000", "h2"],
      ["https://10.0.0.5:8000", "h2c"],
      ["http://10.0.0.5:8000", "http2"],
    ] as const) {
      const result = NodeSpecSchema.safeParse(node(endpoint, protocol));
      expect(result.success).toBe(false);
      expect(result.error?.issues[0]?.path).toEqual(["protocol"]);
    }
  });

  it("a policy's first_byte_timeout_ms is whole milliseconds between 100 and 600000", () => {
    const base = {
      name: "p",
      accelerator_preference: [{ family: "H100", priority: 1 }],
      latency_target_ms: 500,
      cost_priority: "latency",
    };
    expect(PolicySpecSchema.parse({ ...base, first_byte_timeout_ms: 4_000 })).toMatchObject({
      first_byte_timeout_ms: 4_000,
    });
    for (const bad of [0, 99, 600_001, 1.5, "4000"]) {
      const result = PolicySpecSchema.safeParse({ ...base, first_byte_timeout_ms: bad });
      expect(result.success).toBe(false);
      expect(result.error?.issues[0]?.path).toEqual(["first_byte_timeout_ms"]);
    }
  });

  it("name the offending field", () => {
    const result = FleetDocumentSchema.safeParse({
      apiVersion: "zml/v1",
      nodes: [
        {
          id: "bad id",
          endpoint: "ftp://x",
          framework: "vllm",
          accelerator_family: "H100",
          tier: 5,
          models: ["m"],
        },
      ],
    });
    expect(result.success).toBe(false);
    const paths = result.error!.issues.map((i) => i.path.join("."));
    expect(paths).toEqual(
      expect.arrayContaining(["nodes.0.id", "nodes.0.endpoint", "nodes.0.tier"]),
    );
  });

  it("reject unknown keys so typos do not pass silently", () => {
    const result = FleetDocumentSchema.safeParse({ apiVersion: "zml/v1", policy: [] });
    expect(result.success).toBe(false);
  });
});
