import { describe, expect, it } from "vitest";
import { startAzurePricesFake, startGcpBillingFake } from "@zml/cloud-sim";
import { createAzureSpotSource, createGcpSpotSource } from "../src/index.ts";
import { account, secretDir, target } from "./helpers.ts";

const signal = new AbortController().signal;
const azureAccount = account({
  id: "az",
  provider: "azure",
  regions: ["eastus"],
  credentials: { kind: "none" },
});
const SIZE = "Standard_ND96isr_H100_v5";

describe("Azure Retail Prices API against a local fake", () => {
  const meters = (
    fake: Awaited<ReturnType<typeof startAzurePricesFake>>,
    spot: number | string,
  ) => {
    const common = { armRegionName: "eastus", armSkuName: SIZE };
    fake.setMeter({
      ...common,
      skuName: "ND96isr H100 v5",
      productName: "Virtual Machines NDsr H100 v5 Series",
      retailPrice: 98.32,
    });
    fake.setMeter({
      ...common,
      skuName: "ND96isr H100 v5 Low Priority",
      productName: "Virtual Machines NDsr H100 v5 Series",
      retailPrice: 40,
    });
    fake.setMeter({
      ...common,
      skuName: "ND96isr H100 v5 Spot",
      productName: "Virtual Machines NDsr H100 v5 Series Windows",
      retailPrice: 60,
    });
    fake.setMeter({
      ...common,
      skuName: "ND96isr H100 v5 Spot",
      productName: "Virtual Machines NDsr H100 v5 Series",
      retailPrice: spot,
    });
    fake.setMeter({
      armRegionName: "westus",
      armSkuName: SIZE,
      skuName: "ND96isr H100 v5 Spot",
      productName: "Virtual Machines NDsr H100 v5 Series",
      retailPrice: 1,
    });
  };

  it("follows NextPageLink and takes the Linux spot meter of the size and region, per GPU-hour", async () => {
    await using fake = await startAzurePricesFake({ pageSize: 1 });
    meters(fake, 19.6);
    const source = createAzureSpotSource({ baseUrl: fake.url });
    const result = await source.fetch(
      azureAccount,
      [target("nd", { region: "eastus", instanceType: SIZE })],
      signal,
    );
    expect(result).toMatchObject({
      problems: [],
      quotes: [{ nodeId: "nd", usdPerGpuHour: 2.45, source: "azure:RetailPrices" }],
    });
    expect(fake.stats().requests).toBe(4); // four meters match the filter, one per page
    expect(fake.filters()[0]).toBe(
      `serviceName eq 'Virtual Machines' and armRegionName eq 'eastus' and armSkuName eq '${SIZE}' and priceType eq 'Consumption'`,
    );
  });

  it("unknown sizes, bad prices, malformed pages, throttling and outages each get their kind", async () => {
    await using fake = await startAzurePricesFake();
    meters(fake, "n/a");
    const source = createAzureSpotSource({ baseUrl: fake.url });
    const result = await source.fetch(
      azureAccount,
      [
        target("nd", { region: "eastus", instanceType: SIZE }),
        target("typo", { region: "eastus", instanceType: "Standard_Nope" }),
      ],
      signal,
    );
    expect(result.problems.map((p) => [p.nodeId, p.error.kind])).toEqual([
      ["nd", "bad_price"],
      ["typo", "unknown_instance_type"],
    ]);
    const one = [target("nd", { region: "eastus", instanceType: SIZE })];
    for (const [fault, kind] of [
      ["malformed", "malformed"],
      ["throttle", "throttled"],
      ["down", "unavailable"],
    ] as const) {
      fake.fail(fault, 1);
      await expect(source.fetch(azureAccount, one, signal)).rejects.toMatchObject({ kind });
    }
  });
});

describe("Cloud Billing Catalog API against a local fake", () => {
  const gcpAccount = (path: string) =>
    account({
      id: "gcp",
      provider: "gcp",
      regions: ["us-central1"],
      credentials: { kind: "secret_file", path },
    });
  const gpu = (usdPerHour: number, region = "us-central1", usageType = "Preemptible") => ({
    description: `${usageType === "Preemptible" ? "Spot Preemptible " : ""}Nvidia H100 80GB GPU running in ${region}`,
    resourceGroup: "GPU",
    usageType,
    serviceRegions: [region],
    usdPerHour,
  });

  it("pages with nextPageToken and prices the spot GPU SKU of the region, with an API key", async () => {
    await using fake = await startGcpBillingFake({ pageSize: 1, credential: "test-api-key-1" });
    await using secrets = await secretDir();
    fake.setSku(gpu(9.8, "us-central1", "OnDemand"));
    fake.setSku({
      ...gpu(1),
      description: "Spot Preemptible N2 Instance Core running in Americas",
      resourceGroup: "CPU",
    });
    fake.setSku(gpu(2.253));
    fake.setSku(gpu(1.1, "europe-west4"));
    const path = await secrets.file("gcp.json", { api_key: "test-api-key-1" });
    const source = createGcpSpotSource({ baseUrl: fake.url });
    const result = await source.fetch(
      gcpAccount(path),
      [
        target("a3", {
          region: "us-central1",
          instanceType: "a3-highgpu-8g",
          gpuType: "Nvidia H100 80GB",
        }),
      ],
      signal,
    );
    expect(result).toMatchObject({
      problems: [],
      quotes: [{ nodeId: "a3", usdPerGpuHour: 2.253 }],
    });
    expect(fake.stats().requests).toBe(4);
    expect(new Set(fake.auths())).toEqual(new Set(["key:test-api-key-1"]));
  });

  it("an OAuth token works; a refused one is auth, a missing gpu_type is config, garbage is malformed", async () => {
    await using fake = await startGcpBillingFake({ credential: "ya29.valid-token" });
    await using secrets = await secretDir();
    fake.setSku(gpu(2));
    const good = await secrets.file("good.json", { access_token: "ya29.valid-token" });
    const expired = await secrets.file("old.json", { access_token: "ya29.expired-token" });
    const source = createGcpSpotSource({ baseUrl: fake.url });
    const t = target("a3", { region: "us-central1", gpuType: "nvidia h100 80gb" });
    const ok = await source.fetch(
      gcpAccount(good),
      [t, target("bare", { region: "us-central1" })],
      signal,
    );
    expect(ok.quotes.map((q) => q.nodeId)).toEqual(["a3"]);
    expect(ok.problems.map((p) => [p.nodeId, p.error.kind])).toEqual([["bare", "config"]]);
    await expect(source.fetch(gcpAccount(expired), [t], signal)).rejects.toMatchObject({
      kind: "auth",
    });
    fake.fail("malformed", 1);
    await expect(source.fetch(gcpAccount(good), [t], signal)).rejects.toMatchObject({
      kind: "malformed",
    });
  });
});
