import { describe, expect, it } from "vitest";
import { FleetDocumentError, parseFleetDocument, planFleetChanges } from "../src/index.ts";

const yaml = `
apiVersion: zml/v1
nodes:
  - id: h100-a
    endpoint: http://10.0.0.1:8000
    framework: vllm
    accelerator_family: H100
    tier: 1
    models: [m]
  - id: mi300x-a
    endpoint: http://10.0.0.2:8000
    framework: vllm
    accelerator_family: MI300X
    tier: 1
    models: [m]
models:
  - id: m
    default_policy: interactive
policies:
  - name: interactive
    accelerator_preference:
      - family: H100
        priority: 1
    latency_target_ms: 2000
    cost_priority: latency
accounts:
  - id: demo
    allowed_tiers: [1]
`;

describe("parseFleetDocument", () => {
  it("parses the YAML and records registration order", () => {
    const doc = parseFleetDocument(yaml);
    expect(doc.nodes.map((n) => [n.id, n.registered_at])).toEqual([
      ["h100-a", 0],
      ["mi300x-a", 1],
    ]);
    expect(doc.nodes[0]!.max_concurrency).toBe(16);
  });

  it("lists every problem with the field's path", () => {
    const bad = yaml.replace(
      "tier: 1\n    models: [m]\n  - id: mi300x-a",
      "tier: seven\n    models: [m]\n  - id: h100-a",
    );
    let error: FleetDocumentError | undefined;
    try {
      parseFleetDocument(bad.replace("default_policy: interactive", "default_policy: nope"));
    } catch (e) {
      error = e as FleetDocumentError;
    }
    expect(error).toBeInstanceOf(FleetDocumentError);
    expect(error!.problems.map((p) => p.path)).toContain("nodes.0.tier");
  });

  it("gives each problem the line and column of its field in the YAML", () => {
    const bad = yaml
      .replace(
        "    tier: 1\n    models: [m]\n  - id: mi300x-a",
        "    tier: seven\n    models: [m]\n  - id: mi300x-a",
      )
      .replace("    allowed_tiers: [1]", "    allowed_tiers: [1]\n    colour: blue");
    const error = (() => {
      try {
        parseFleetDocument(bad.replace("default_policy: interactive", "default_policy: nope"));
      } catch (e) {
        return e as FleetDocumentError;
      }
      throw new Error("expected a FleetDocumentError");
    })();
    const lineOf = (needle: string) => bad.split("\n").findIndex((l) => l.includes(needle)) + 1;
    const byPath = Object.fromEntries(error.problems.map((p) => [p.path, p]));
    // The value of the wrongly typed field, the unknown key itself.
    expect(byPath["nodes.0.tier"]).toMatchObject({ line: lineOf("tier: seven"), column: 11 });
    expect(byPath["accounts.0.colour"]).toMatchObject({ line: lineOf("colour: blue") });
    expect(error.message).toContain(`${lineOf("tier: seven")}:11: nodes.0.tier:`);
  });

  it("points a missing field at the object that lacks it, and a reference at its value", () => {
    const missing = yaml.replace("    accelerator_family: MI300X\n", "");
    const problem = (() => {
      try {
        parseFleetDocument(missing);
      } catch (e) {
        return (e as FleetDocumentError).problems[0]!;
      }
      throw new Error("expected a FleetDocumentError");
    })();
    expect(problem.path).toBe("nodes.1.accelerator_family");
    expect(problem.line).toBe(missing.split("\n").findIndex((l) => l.includes("id: mi300x-a")) + 1);
    const dangling = yaml.replace("default_policy: interactive", "default_policy: nope");
    expect(() => parseFleetDocument(dangling)).toThrow(
      new RegExp(
        `${dangling.split("\n").findIndex((l) => l.includes("default_policy: nope")) + 1}:\\d+: models\\.0\\.default_policy`,
      ),
    );
  });

  it("rejects duplicate ids and dangling policy references", () => {
    const dup = yaml
      .replace("id: mi300x-a", "id: h100-a")
      .replace("default_policy: interactive", "default_policy: nope");
    expect(() => parseFleetDocument(dup)).toThrow(
      /nodes\.1: duplicate id 'h100-a'[\s\S]*models\.0\.default_policy/,
    );
  });

  it("reports broken YAML as a document problem", () => {
    expect(() => parseFleetDocument("nodes: [unclosed")).toThrow(FleetDocumentError);
    expect(() => parseFleetDocument("apiVersion: zml/v1\nnodes: [unclosed")).toThrow(
      /^invalid fleet document:\n {2}\d+:\d+: \(document\):/,
    );
  });
});

describe("planFleetChanges", () => {
  const doc = parseFleetDocument(yaml);

  it("creates everything in an empty store", () => {
    const changes = planFleetChanges(new Map(), doc, false);
    expect(changes.filter((c) => c.action === "create")).toHaveLength(5);
  });

  it("is idempotent: the same document over its own result changes nothing", () => {
    const stored = new Map<string, Map<string, string>>();
    for (const c of planFleetChanges(new Map(), doc, false)) {
      if (!stored.has(c.bucket)) stored.set(c.bucket, new Map());
      stored.get(c.bucket)!.set(c.key, c.value!);
    }
    expect(planFleetChanges(stored, doc, true)).toEqual([]);

    const edited = { ...doc, nodes: doc.nodes.slice(0, 1) };
    edited.nodes[0] = { ...edited.nodes[0]!, max_concurrency: 4 };
    const changes = planFleetChanges(stored, edited, true).map(({ key, action }) => [key, action]);
    expect(changes).toEqual([
      ["h100-a", "update"],
      ["mi300x-a", "delete"],
    ]);
    expect(planFleetChanges(stored, edited, false).some((c) => c.action === "delete")).toBe(false);
  });
});
