// The NetworkPolicy evaluator the manifest checks rely on, against the API's rules.
import { describe, expect, it } from "vitest";
import { allows, selects } from "./network-policy.ts";
import type { Endpoint, NetworkPolicy } from "./network-policy.ts";

const pod = (labels: Record<string, string>, namespace = "a"): Endpoint => ({
  pod: true,
  namespace,
  namespaceLabels: { "kubernetes.io/metadata.name": namespace },
  labels,
});
const policy = (spec: NetworkPolicy["spec"], namespace = "a"): NetworkPolicy => ({
  metadata: { name: "p", namespace },
  spec,
});
const web = pod({ app: "web" });
const db = pod({ app: "db" });

describe("selects", () => {
  it("matches labels and expressions", () => {
    expect(selects({}, { x: "1" })).toBe(true);
    expect(selects({ matchLabels: { x: "1" } }, { x: "1", y: "2" })).toBe(true);
    expect(selects({ matchLabels: { x: "1" } }, { x: "2" })).toBe(false);
    const inAB = { matchExpressions: [{ key: "x", operator: "In", values: ["a", "b"] }] };
    expect(selects(inAB, { x: "b" })).toBe(true);
    expect(selects(inAB, { x: "c" })).toBe(false);
    expect(selects({ matchExpressions: [{ key: "x", operator: "DoesNotExist" }] }, {})).toBe(true);
  });
});

describe("allows", () => {
  it("allows everything when no policy selects either side", () => {
    expect(allows([], { from: web, to: db, port: 5432 })).toBe(true);
  });

  it("isolates selected pods per direction, and needs both sides to allow", () => {
    const denyAll = policy({ podSelector: {}, policyTypes: ["Ingress", "Egress"] });
    const dbIngress = policy({
      podSelector: { matchLabels: { app: "db" } },
      policyTypes: ["Ingress"],
      ingress: [
        { from: [{ podSelector: { matchLabels: { app: "web" } } }], ports: [{ port: 5432 }] },
      ],
    });
    const webEgress = policy({
      podSelector: { matchLabels: { app: "web" } },
      policyTypes: ["Egress"],
      egress: [{ to: [{ podSelector: { matchLabels: { app: "db" } } }], ports: [{ port: 5432 }] }],
    });
    expect(allows([denyAll, dbIngress], { from: web, to: db, port: 5432 })).toBe(false);
    expect(allows([denyAll, dbIngress, webEgress], { from: web, to: db, port: 5432 })).toBe(true);
    expect(allows([denyAll, dbIngress, webEgress], { from: web, to: db, port: 5433 })).toBe(false);
    expect(allows([denyAll, dbIngress, webEgress], { from: db, to: web, port: 5432 })).toBe(false);
    // A pod selector alone means the policy's own namespace.
    const other = pod({ app: "web" }, "b");
    expect(allows([dbIngress], { from: other, to: db, port: 5432 })).toBe(false);
    // UDP is not TCP.
    expect(allows([dbIngress], { from: web, to: db, port: 5432, protocol: "UDP" })).toBe(false);
  });

  it("matches namespaces by label and addresses by block, minus its exceptions", () => {
    const egress = policy({
      podSelector: {},
      policyTypes: ["Egress"],
      egress: [
        { to: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "b" } } }] },
        { to: [{ ipBlock: { cidr: "10.0.0.0/8", except: ["10.9.0.0/16"] } }] },
      ],
    });
    expect(allows([egress], { from: web, to: pod({}, "b"), port: 1 })).toBe(true);
    expect(allows([egress], { from: web, to: pod({}, "c"), port: 1 })).toBe(false);
    expect(allows([egress], { from: web, to: { pod: false, ip: "10.1.2.3" }, port: 1 })).toBe(true);
    expect(allows([egress], { from: web, to: { pod: false, ip: "10.9.2.3" }, port: 1 })).toBe(
      false,
    );
    expect(allows([egress], { from: web, to: { pod: false, ip: "11.0.0.1" }, port: 1 })).toBe(
      false,
    );
  });
});
