import { readFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  StructuredFieldParseError,
  parseRoutingHeader,
  parseSfDictionary,
  serializeRoutingHeader,
} from "../src/index.ts";
import type { RoutingInfo } from "../src/index.ts";

const sample: RoutingInfo = {
  decisionId: "0f8e6c9e-1c1d-4c3f-9d1e-3b2a1f0e9d8c",
  node: "h100-a",
  policy: "interactive",
  family: "H100",
  queueDepth: 3,
  tier: 1,
  attempts: 2,
};

describe("x-zml-routing header", () => {
  it("serialises as an RFC 8941 dictionary", () => {
    expect(serializeRoutingHeader(sample)).toBe(
      'decision-id="0f8e6c9e-1c1d-4c3f-9d1e-3b2a1f0e9d8c", node="h100-a", policy="interactive", family="H100", queue-depth=3, tier=1, attempts=2',
    );
  });

  it("round-trips any printable ASCII strings and integers", () => {
    const printable = fc.string({
      unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
    });
    fc.assert(
      fc.property(
        printable,
        printable,
        printable,
        printable,
        fc.nat({ max: 1_000_000 }),
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 1, max: 3 }),
        (decisionId, node, policy, family, queueDepth, tier, attempts) => {
          const info = { decisionId, node, policy, family, queueDepth, tier, attempts };
          expect(parseRoutingHeader(serializeRoutingHeader(info))).toEqual(info);
        },
      ),
    );
  });

  it("replaces characters a structured-field string cannot carry", () => {
    const header = serializeRoutingHeader({ ...sample, family: "H100\r\nX-Evil: 1 é" });
    expect(header).not.toMatch(/[\r\n]/);
    expect(parseRoutingHeader(header).family).toBe("H100??X-Evil: 1 ?");
  });

  it("parses tokens and booleans, and rejects what we never send", () => {
    expect(parseSfDictionary("a=tok, b, c=?0, d=-5")).toEqual(
      new Map<string, unknown>([
        ["a", "tok"],
        ["b", true],
        ["c", false],
        ["d", -5],
      ]),
    );
    for (const bad of ['a="x";p=1', "a=(1 2)", 'a="unterminated', "A=1", "a=1,", "a=1.5"]) {
      expect(() => parseSfDictionary(bad), bad).toThrow(StructuredFieldParseError);
    }
  });

  it("reports a missing field", () => {
    expect(() => parseRoutingHeader('node="x"')).toThrow(/decision-id/);
  });
});

/** Shared with the Python SDK's tests (libs/python-sdk/tests/test_routing_header.py). */
const vectors = JSON.parse(
  readFileSync(join(import.meta.dirname, "routing-header-vectors.json"), "utf8"),
) as {
  valid: Array<{ name: string; header: string; routing: RoutingInfo }>;
  invalid: Array<{ name: string; header: string }>;
};

describe("x-zml-routing vectors", () => {
  it.each(vectors.valid.map((v) => [v.name, v] as const))("reads %s", (_, v) => {
    expect(parseRoutingHeader(v.header)).toEqual(v.routing);
  });

  it.each(vectors.invalid.map((v) => [v.name, v] as const))("refuses %s", (_, v) => {
    expect(() => parseRoutingHeader(v.header)).toThrow(StructuredFieldParseError);
  });
});
