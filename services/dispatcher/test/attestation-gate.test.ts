import { AttestationResultSchema, NodeSpecSchema } from "@zml/contracts";
import type { AttestationResult, NodeSpec, Revocation } from "@zml/contracts";
import { attestationResult, nodeSpec } from "@zml/contracts/testing";
import { describe, expect, it } from "vitest";
import { createRoutingState } from "../src/fleet/routing-state.ts";
import { createAttestationGate } from "../src/node/attestation-gate.ts";

const NOW = Date.parse("2026-06-01T12:00:00Z");
const KEY = "7e".repeat(32);

const spec = (endpoint = "https://tee-a.example:8443"): NodeSpec =>
  NodeSpecSchema.parse(nodeSpec("tee-a", { endpoint, tier: 3 }));

const result = (extra: Partial<AttestationResult> = {}): AttestationResult =>
  AttestationResultSchema.parse(
    attestationResult({
      verified_at: NOW - 1000,
      expires_at: NOW + 60_000,
      tls_key_sha256: KEY,
      ...extra,
    }),
  );

function gate() {
  const nodes = new Map([["tee-a", spec()]]);
  const results = new Map([["tee-a", result()]]);
  const revocations = new Map<string, Revocation>();
  const routing = createRoutingState({
    nodes,
    models: new Map(),
    policies: new Map(),
    costs: new Map(),
    quality: new Map(),
    states: new Map(),
  });
  const reattested: string[] = [];
  const g = createAttestationGate({ nodes, results, revocations }, routing, {
    reattest: (id) => reattested.push(id),
    clock: () => NOW,
  });
  return { g, nodes, results, reattested };
}

describe("attestation gate", () => {
  it("pins the attested key for the endpoint the attestation was made at", () => {
    const { g } = gate();
    expect(g.verdict("tee-a", "m", NOW)).toEqual({ usable: true });
    expect(g.pinFor(spec())).toBe(KEY);
  });

  it("withdraws the attestation the moment the endpoint changes", () => {
    const { g, nodes } = gate();
    const moved = spec("https://elsewhere.example:8443");
    nodes.set("tee-a", moved);
    expect(g.verdict("tee-a", "m", NOW)).toMatchObject({
      usable: false,
      reason: "endpoint_changed",
    });
    expect(g.pinFor(moved)).toBeUndefined();
    // A pool still holding the old spec gets no pin either.
    expect(g.pinFor(spec())).toBeUndefined();
  });

  it("marks a node caught with another key unattested and asks for one re-attestation", () => {
    const { g, results, reattested } = gate();
    g.onMismatch("tee-a", "00".repeat(32));
    g.onMismatch("tee-a", "00".repeat(32));
    expect(reattested).toEqual(["tee-a"]);
    expect(g.verdict("tee-a", "m", NOW)).toMatchObject({ usable: false, reason: "key_mismatch" });
    expect(g.pinFor(spec())).toBeUndefined();
    // A new result (the re-attestation) is judged on its own.
    const other = "11".repeat(32);
    results.set("tee-a", result({ verified_at: NOW, tls_key_sha256: other }));
    expect(g.verdict("tee-a", "m", NOW)).toEqual({ usable: true });
    expect(g.pinFor(spec())).toBe(other);
  });

  it("pins nothing for a result that binds no key", () => {
    const { g, results } = gate();
    results.set("tee-a", result({ tls_key_sha256: null }));
    expect(g.verdict("tee-a", "m", NOW)).toMatchObject({ usable: false, reason: "unbound" });
    expect(g.pinFor(spec())).toBeUndefined();
  });
});
