import { describe, expect, it } from "vitest";
import { compareAgainstFloor, renderComparison } from "./compare.ts";
import type { ScenarioSummary } from "./summary.ts";

const row = (key: string, rps: number | undefined) =>
  ({
    key,
    title: `${key} row`,
    ...(rps === undefined ? {} : { vsFloor: { rps, floorRps: 0.2, addedP50: 0, addedP99: 0 } }),
  }) as ScenarioSummary;

describe("the bench's check against the floor between two runs", () => {
  it("flags a row whose ZML ÷ floor throughput fell by more than 15 %", () => {
    const changes = compareAgainstFloor(
      { scenarios: [row("c16", 0.6), row("prompt100k", 0.8)] },
      { scenarios: [row("c16", 0.5), row("prompt100k", 0.7)] },
    );
    expect(changes.map((c) => [c.key, c.regressed])).toEqual([
      ["c16", true], // −16.7 %
      ["prompt100k", false], // −12.5 %
    ]);
    expect(changes[0]!.change).toBeCloseTo(-1 / 6, 6);
    const text = renderComparison(changes, "test");
    expect(text).toContain("!! 1 row(s) fell more than 15 % against the floor");
    expect(text).toMatch(/REGRESSED c16 +ZML ÷ floor 0\.60× → 0\.50× \(-17 %\)/);
  });

  it("never flags a gain, and skips rows either run did not measure against the floor", () => {
    const changes = compareAgainstFloor(
      { scenarios: [row("c16", 0.5), row("stream1", 0.7), row("tier4c16", undefined)] },
      { scenarios: [row("c16", 0.9), row("tier4c16", undefined), row("c64", 0.4)] },
    );
    expect(changes).toEqual([expect.objectContaining({ key: "c16", regressed: false })]);
    expect(renderComparison(changes, "test")).toMatch(/^against the floor, test: no row dropped/);
  });
});
