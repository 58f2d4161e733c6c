import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openKv } from "@zml/bus";
import { startAzurePricesFake, startEc2Fake } from "@zml/cloud-sim";
import type { AzureFake, Ec2Fake } from "@zml/cloud-sim";
import { CloudSpotCostSchema, KV_BUCKETS, spotCostKey } from "@zml/contracts";
import { pollUntil, repoRoot } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chat, postChat } from "../support/http.ts";
import { runCommand } from "../support/run-command.ts";
import { adminHeaders, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

// Two equal H100 nodes, one per cloud account (AWS through the EC2 fake, Azure through the
// Retail Prices fake); a `cost` policy routes on their spot prices as the feed writes them.
const INTERVAL_S = 5;
// Equal nodes must also be equally fast: the cost ranking compares a request's cost, the
// node-hour price times the time the node's measured speed gives it (routing README,
// "Formulas"). A simulator without a pace answers in microseconds, so the speed measured
// for each node is timing noise (68 000 against 24 000 tok/s seen under CPU load), which
// outweighs the 4:3 price gap the test moves on, and a node that lost once gets no traffic
// to be measured again. Paced, a request's 15 token gaps take 150 ms: a timer less than
// 50 ms late (a loaded machine) keeps the two speeds within the 4:3 the prices decide by.
const TOKENS_PER_SECOND = 100;
const COMPLETION_TOKENS = 16;
const MAX_AGE_S = 8;
const AWS_NODE = "aws-p5";
const AZURE_NODE = "azure-nd";
const SIZE = "Standard_ND96isr_H100_v5";

const zml = (...args: string[]) =>
  runCommand(process.execPath, [join(repoRoot(), "libs/cli/src/main.ts"), ...args], {
    env: { ...process.env, ...stack.nats.serviceEnv("admin") },
  });

let stack: Stack;

describe("cost routing follows live spot prices from each cloud account", () => {
  let ec2: Ec2Fake;
  let azure: AzureFake;
  let secrets: string;

  const setAzure = (usdPerVmHour: number) =>
    azure.setMeter({
      armRegionName: "eastus",
      armSkuName: SIZE,
      skuName: "ND96isr H100 v5 Spot",
      productName: "Virtual Machines NDsr H100 v5 Series",
      retailPrice: usdPerVmHour,
    });
  const setAws = (usdPerInstanceHour: number) =>
    ec2.setSpotPrice({
      instanceType: "p5.48xlarge",
      availabilityZone: "us-east-1a",
      price: usdPerInstanceHour,
    });
  const spotPrice = async (account: string, node: string) => {
    const kv = await openKv(stack.bus, KV_BUCKETS.costs);
    const e = await kv.get(spotCostKey(account, node));
    return e?.operation === "PUT" ? CloudSpotCostSchema.parse(e.json()) : undefined;
  };
  const route = async () => {
    const res = await postChat(stack.intakeUrl, chat("spot-model"));
    expect(res.status).toBe(200);
    return res.routing!;
  };

  beforeAll(async () => {
    ec2 = await startEc2Fake({ pageSize: 1 });
    azure = await startAzurePricesFake();
    secrets = await mkdtemp(join(tmpdir(), "zml-e2e-spot-"));
    const awsKeys = join(secrets, "aws.json");
    await writeFile(
      awsKeys,
      JSON.stringify({
        access_key_id: "AKIAE2EFAKEKEY000001",
        secret_access_key: "e2e-secret-for-the-local-fake-only",
      }),
      { mode: 0o600 },
    );
    setAws(16); // 2 USD per GPU-hour
    setAzure(24); // 3 USD per GPU-hour
    stack = await startStack({
      nodes: [
        {
          nodeId: AWS_NODE,
          family: "H100",
          models: ["spot-model"],
          tokensPerSecond: TOKENS_PER_SECOND,
          completionTokens: COMPLETION_TOKENS,
          cloud: {
            account: "aws-a",
            region: "us-east-1",
            zone: "us-east-1a",
            instance_type: "p5.48xlarge",
            gpus_per_instance: 8,
            fallback_usd_per_gpu_hour: 1,
          },
        },
        {
          nodeId: AZURE_NODE,
          family: "H100",
          models: ["spot-model"],
          tokensPerSecond: TOKENS_PER_SECOND,
          completionTokens: COMPLETION_TOKENS,
          cloud: {
            account: "azure-b",
            region: "eastus",
            instance_type: SIZE,
            gpus_per_instance: 8,
            fallback_usd_per_gpu_hour: 5,
          },
        },
      ],
      fleet: {
        models: [{ id: "spot-model", default_policy: "cheapest" }],
        policies: [
          {
            name: "cheapest",
            accelerator_preference: [{ family: "H100", priority: 1 }],
            latency_target_ms: 60_000,
            cost_priority: "cost",
            queue_on_saturation: false,
            max_queue_ms: 0,
            prefix_affinity: true,
          },
        ],
        cloud_accounts: [
          {
            id: "aws-a",
            provider: "aws",
            account_id: "123456789012",
            regions: ["us-east-1"],
            credentials: { kind: "secret_file", path: awsKeys },
            refresh_interval_s: INTERVAL_S,
            max_price_age_s: MAX_AGE_S,
            product_description: "Linux/UNIX",
            billing_service: "6F81-5844-456A",
          },
          {
            id: "azure-b",
            provider: "azure",
            account_id: "sub-e2e",
            regions: ["eastus"],
            credentials: { kind: "none" },
            refresh_interval_s: INTERVAL_S,
            max_price_age_s: MAX_AGE_S,
            product_description: "Linux/UNIX",
            billing_service: "6F81-5844-456A",
          },
        ],
      },
      env: {
        COST_FEED_AWS_ENDPOINT: ec2.url,
        COST_FEED_AWS_MAX_ATTEMPTS: "1",
        COST_FEED_AZURE_URL: azure.url,
      },
    });
    await waitForStatus(stack, "Active");
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await ec2?.close();
    await azure?.close();
    if (secrets) await rm(secrets, { recursive: true, force: true });
  });

  it("routes to the cheaper account, then follows a price move within one feed interval", async () => {
    await pollUntil(async () => (await spotPrice("aws-a", AWS_NODE)) !== undefined, {
      timeoutMs: 15_000,
      message: "waiting for the AWS spot price in the cost table",
    });
    await pollUntil(async () => (await spotPrice("azure-b", AZURE_NODE)) !== undefined, {
      timeoutMs: 15_000,
      message: "waiting for the Azure spot price in the cost table",
    });
    expect(await spotPrice("aws-a", AWS_NODE)).toMatchObject({
      usd_per_gpu_hour: 2,
      source: "aws:DescribeSpotPriceHistory",
      max_age_ms: MAX_AGE_S * 1000,
    });
    const first = await route();
    expect(first).toMatchObject({ node: AWS_NODE, price: "spot", priceStale: false });
    expect(first.priceAgeS).toBeLessThanOrEqual(INTERVAL_S + 1);

    // The AWS spot market moves up to 4 USD per GPU-hour: Azure (3) is now cheaper.
    const movedAt = Date.now();
    setAws(32);
    await pollUntil(async () => (await route()).node === AZURE_NODE, {
      timeoutMs: 20_000,
      intervalMs: 200,
      message: "waiting for traffic on the Azure node",
    });
    // One interval (jittered by up to 10%) plus the KV watch and a request's worth.
    expect(Date.now() - movedAt).toBeLessThan(INTERVAL_S * 1100 + 2_000);
    // Every request now goes there, on a fresh spot price.
    for (let i = 0; i < 5; i++) {
      expect(await route()).toMatchObject({ node: AZURE_NODE, price: "spot", priceStale: false });
    }
    expect(ec2.calls().some((c) => c.nextToken !== undefined)).toBe(false); // one zone: one page
  }, 60_000);

  it("a feed down past the age limit falls back to the configured rates, visibly", async () => {
    ec2.fail("down", Number.POSITIVE_INFINITY);
    azure.fail("down", Number.POSITIVE_INFINITY);
    const downAt = Date.now();
    // Configured rates: AWS 1, Azure 5 per GPU-hour, so the AWS node wins again, marked stale.
    // (Azure's price may age first: AWS then wins on its spot price 4 against Azure's 5.)
    await pollUntil(
      async () => {
        const r = await route();
        return r.node === AWS_NODE && r.price === "fallback";
      },
      {
        timeoutMs: (MAX_AGE_S + INTERVAL_S) * 1000 + 5_000,
        intervalMs: 250,
        message: "waiting for the configured rates deciding",
      },
    );
    expect(Date.now() - downAt).toBeGreaterThan(1_000); // not before the prices aged
    const routing = await route();
    expect(routing).toMatchObject({ node: AWS_NODE, price: "fallback", priceStale: true });
    expect(routing.priceAgeS).toBeGreaterThanOrEqual(MAX_AGE_S);
    const logs = stack.logs();
    expect(logs).toMatch(
      /node aws-p5 spot price \d+s old is past its 8s age limit; using its fallback rate/,
    );
    expect(logs).toMatch(/"account":"aws-a".*"kind":"unavailable".*spot prices not refreshed/);

    // Operators see the same: the admin API and `zml get costs` say which prices are stale.
    const res = await fetch(`${stack.intakeUrl}/admin/v1/costs`, { headers: adminHeaders() });
    const listed = (await res.json()) as {
      data: { key: string; status: { source: string; stale: boolean; age_s: number } }[];
    };
    expect(listed.data.find((d) => d.key === spotCostKey("aws-a", AWS_NODE))?.status).toMatchObject(
      {
        source: "aws:DescribeSpotPriceHistory",
        stale: true,
      },
    );
    const cli = await zml("get", "costs");
    expect(cli.code).toBe(0);
    expect(cli.stdout).toMatch(
      /spot\.aws-a\.aws-p5 .*aws:DescribeSpotPriceHistory +\d+s\/8s +yes \(fallback rate used\)/,
    );

    // The feed back: fresh spot prices decide again (AWS 4 vs Azure 3).
    ec2.heal();
    azure.heal();
    await pollUntil(async () => (await route()).price === "spot", {
      timeoutMs: 30_000,
      intervalMs: 250,
      message: "waiting for spot prices again",
    });
    await pollUntil(async () => (await route()).node === AZURE_NODE, {
      timeoutMs: 10_000,
      message: "waiting for the cheaper spot node again",
    });
  }, 90_000);
});
