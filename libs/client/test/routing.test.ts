import { serializeRoutingHeader } from "@zml/contracts";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseRoutingHeader, RoutingHeaderError } from "../src/index.ts";

/**
 * The SDK reads `x-zml-routing` with the gateway's parser, bundled; these tests hold what it
 * reads, and the errors it throws, to the gateway's serializer and the SDK's own types.
 */

const printable = fc.string({
  unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
});
const routing = fc.record({
  decisionId: printable,
  node: printable,
  policy: printable,
  family: printable,
  queueDepth: fc.nat({ max: 1_000_000 }),
  tier: fc.integer({ min: 1, max: 4 }),
  attempts: fc.integer({ min: 1, max: 3 }),
});

describe("parseRoutingHeader", () => {
  it("reads back whatever the gateway serializes", () => {
    fc.assert(
      fc.property(routing, (info) => {
        expect(parseRoutingHeader(serializeRoutingHeader(info))).toEqual(info);
      }),
    );
  });

  it("skips parameters and members the gateway may add later", () => {
    const sent = serializeRoutingHeader({
      decisionId: "d",
      node: "h100-a",
      policy: "p",
      family: "H100",
      queueDepth: 0,
      tier: 1,
      attempts: 2,
    });
    const later = `${sent};v=2, region=eu-west, cost=0.25, cached, raw=:aGk=:`;
    expect(parseRoutingHeader(later).attempts).toBe(2);
  });

  it.each([
    ["empty", ""],
    [
      "a string tier",
      'decision-id="d", node="n", policy="p", family="f", queue-depth=0, tier="1", attempts=1',
    ],
    [
      "a missing member",
      'decision-id="d", node="n", policy="p", family="f", queue-depth=0, tier=1',
    ],
    [
      "a trailing comma",
      'decision-id="d", node="n", policy="p", family="f", queue-depth=0, tier=1, attempts=1,',
    ],
    ["an open string", 'decision-id="d, node="n"'],
    ["an upper-case key", 'Node="n"'],
  ])("refuses %s", (_, header) => {
    expect(() => parseRoutingHeader(header)).toThrow(RoutingHeaderError);
  });
});
