import { describe, expect, it } from "vitest";
import { startAzurePricesFake, startEc2Fake } from "@zml/cloud-sim";
import { NodeSpecSchema } from "@zml/contracts";
import type { CloudAccountSpec, CloudSpotCost, NodeSpec } from "@zml/contracts";
import { nodeSpec } from "@zml/contracts/testing";
import {
  createAwsSpotSource,
  createAzureSpotSource,
  createCostFeed,
  createGcpSpotSource,
  FIRST_RETRY_MS,
  nextDelayMs,
} from "../src/index.ts";
import type { CostFeedMetrics, PriceErrorKind } from "../src/index.ts";
import { account, secretDir, TEST_AWS_KEYS } from "./helpers.ts";

describe("nextDelayMs", () => {
  const base = { intervalMs: 300_000, jitter: 0, random: 0.5 };
  it("waits the interval after a success, moved by the jitter", () => {
    expect(nextDelayMs({ ...base, failures: 0 })).toBe(300_000);
    expect(nextDelayMs({ ...base, jitter: 0.1, random: 0, failures: 0 })).toBe(270_000);
    expect(nextDelayMs({ ...base, jitter: 0.1, random: 0.999999, failures: 0 })).toBeCloseTo(
      330_000,
      -1,
    );
  });
  it("retries an outage soon and backs off to the interval", () => {
    expect(nextDelayMs({ ...base, failures: 1, kind: "unavailable" })).toBe(FIRST_RETRY_MS);
    expect(nextDelayMs({ ...base, failures: 3, kind: "malformed" })).toBe(4 * FIRST_RETRY_MS);
    expect(nextDelayMs({ ...base, failures: 20, kind: "unavailable" })).toBe(300_000);
  });
  it("backs off throttling and refused credentials beyond the interval, up to four of them", () => {
    expect(nextDelayMs({ ...base, failures: 1, kind: "throttled" })).toBe(300_000);
    expect(nextDelayMs({ ...base, failures: 2, kind: "auth" })).toBe(600_000);
    expect(nextDelayMs({ ...base, failures: 9, kind: "throttled" })).toBe(1_200_000);
  });
});

/** Records what the feed reports; a port of the feed, not a part under test. */
function recordingMetrics() {
  const errors: [string, PriceErrorKind][] = [];
  const successes: string[] = [];
  let changes = 0;
  const metrics: CostFeedMetrics = {
    success: (a) => void successes.push(a),
    changed: () => void changes++,
    error: (a, k) => void errors.push([a, k]),
    price: () => undefined,
    forget: () => undefined,
  };
  return { metrics, errors, successes, changes: () => changes };
}

function cloudNode(id: string, cloud: Record<string, unknown>): NodeSpec {
  return NodeSpecSchema.parse({ ...nodeSpec(id), cloud: { gpus_per_instance: 8, ...cloud } });
}

async function until(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("the cost feed", () => {
  it("writes each node's price, keeps going when one account fails, and keeps the last good price", async () => {
    await using ec2 = await startEc2Fake();
    await using azure = await startAzurePricesFake();
    await using secrets = await secretDir();
    const path = await secrets.file("aws.json", TEST_AWS_KEYS);
    ec2.setSpotPrice({ instanceType: "p5.48xlarge", availabilityZone: "us-east-1a", price: 16 });
    azure.setMeter({
      armRegionName: "eastus",
      armSkuName: "Standard_ND96isr_H100_v5",
      skuName: "ND96isr H100 v5 Spot",
      productName: "Virtual Machines NDsr H100 v5 Series",
      retailPrice: 24,
    });
    const accounts = new Map<string, CloudAccountSpec>([
      [
        "aws-main",
        { ...account({ credentials: { kind: "secret_file", path } }), refresh_interval_s: 0.05 },
      ],
      [
        "az",
        {
          ...account({ id: "az", provider: "azure", regions: ["eastus"] }),
          refresh_interval_s: 0.05,
        },
      ],
    ]);
    const nodes = new Map([
      [
        "p5",
        cloudNode("p5", {
          account: "aws-main",
          region: "us-east-1",
          zone: "us-east-1a",
          instance_type: "p5.48xlarge",
        }),
      ],
      [
        "nd",
        cloudNode("nd", {
          account: "az",
          region: "eastus",
          instance_type: "Standard_ND96isr_H100_v5",
        }),
      ],
      [
        "lost",
        cloudNode("lost", {
          account: "az",
          region: "westeurope",
          instance_type: "Standard_ND96isr_H100_v5",
        }),
      ],
    ]);
    const table = new Map<string, CloudSpotCost>();
    const warnings: string[] = [];
    const rec = recordingMetrics();
    const feed = createCostFeed({
      sources: {
        aws: createAwsSpotSource({ endpoint: ec2.url, maxAttempts: 1 }),
        azure: createAzureSpotSource({ baseUrl: azure.url }),
        gcp: createGcpSpotSource(),
      },
      store: { put: (key, entry) => Promise.resolve(void table.set(key, entry)) },
      metrics: rec.metrics,
      log: {
        info: () => undefined,
        warn: (o, m) => void warnings.push(`${JSON.stringify(o)} ${m}`),
      },
      clock: Date.now,
      random: Math.random,
      jitter: 0.1,
    });
    try {
      feed.update(accounts, nodes);
      await until(() => table.size === 2, "both prices");
      expect(table.get("spot.aws-main.p5")).toMatchObject({
        usd_per_gpu_hour: 2,
        gpus_per_node: 8,
        source: "aws:DescribeSpotPriceHistory",
        max_age_ms: 900_000,
        nodes: ["p5"],
      });
      expect(table.get("spot.az.nd")).toMatchObject({
        usd_per_gpu_hour: 3,
        source: "azure:RetailPrices",
      });
      expect(warnings.join("\n")).toMatch(/"node":"lost","kind":"config".*region westeurope/);

      // AWS down: its errors are counted, its last good price stays, Azure goes on.
      ec2.fail("down", Number.POSITIVE_INFINITY);
      const awsAt = table.get("spot.aws-main.p5")!.updated_at;
      await until(
        () => rec.errors.some(([a, k]) => a === "aws-main" && k === "unavailable"),
        "an aws error",
      );
      const azAt = table.get("spot.az.nd")!.updated_at;
      await until(() => table.get("spot.az.nd")!.updated_at > azAt, "azure refreshed meanwhile");
      expect(table.get("spot.aws-main.p5")!.updated_at).toBe(awsAt);

      // A bad price from Azure is an error of its node; the previous entry is not touched.
      azure.setMeter({
        armRegionName: "eastus",
        armSkuName: "Standard_ND96isr_H100_v5",
        skuName: "ND96isr H100 v5 Spot",
        productName: "Virtual Machines NDsr H100 v5 Series",
        retailPrice: -1,
      });
      await until(
        () => rec.errors.some(([a, k]) => a === "az" && k === "bad_price"),
        "a bad_price error",
      );
      expect(table.get("spot.az.nd")!.usd_per_gpu_hour).toBe(3);
      expect(warnings.join("\n")).toMatch(/"kind":"bad_price".*previous one stands/);

      // AWS back with a new price: the change is counted.
      ec2.heal();
      ec2.setSpotPrice({ instanceType: "p5.48xlarge", availabilityZone: "us-east-1a", price: 12 });
      const changes = rec.changes();
      await until(
        () => table.get("spot.aws-main.p5")!.usd_per_gpu_hour === 1.5,
        "the new aws price",
        15_000,
      );
      expect(rec.changes()).toBeGreaterThan(changes);
      expect(feed.running().sort()).toEqual(["aws-main", "az"]);

      feed.update(new Map([["az", accounts.get("az")!]]), nodes);
      expect(feed.running()).toEqual(["az"]);
    } finally {
      feed.stop();
    }
    expect(feed.running()).toEqual([]);
  }, 30_000);
});
