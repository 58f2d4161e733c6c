import { describe, expect, it } from "vitest";
import { startAzurePricesFake } from "../src/index.ts";
import type { AzureFake } from "../src/index.ts";

interface AzurePage {
  BillingCurrency: string;
  Items: {
    armRegionName: string;
    skuName: string;
    productName: string;
    retailPrice: unknown;
    type: string;
  }[];
  NextPageLink: string | null;
  Count: number;
}

/** A GET as the cost feed makes it: `$filter` in the query, JSON back. */
function prices(fake: AzureFake, filter?: string): Promise<Response> {
  const url = new URL("/api/retail/prices", fake.url);
  url.searchParams.set("api-version", "2023-01-01-preview");
  if (filter !== undefined) url.searchParams.set("$filter", filter);
  return fetch(url);
}

const names = (page: AzurePage) => page.Items.map((i) => `${i.armRegionName} ${i.skuName}`);

function seed(fake: AzureFake): void {
  fake.setMeter({
    armRegionName: "eastus",
    armSkuName: "Standard_ND96isr_H100_v5",
    skuName: "ND96isr H100 v5 Spot",
    productName: "Virtual Machines NDsr H100 v5 Series",
    retailPrice: 28.5,
  });
  fake.setMeter({
    armRegionName: "eastus",
    armSkuName: "Standard_ND96isr_H100_v5",
    skuName: "ND96isr H100 v5 Low Priority",
    productName: "Virtual Machines NDsr H100 v5 Series",
    retailPrice: 30,
  });
  fake.setMeter({
    armRegionName: "westeurope",
    armSkuName: "Standard_ND96isr_H100_v5",
    skuName: "ND96isr H100 v5 Spot",
    productName: "Virtual Machines NDsr H100 v5 Series",
    retailPrice: 31,
    priceType: "DevTestConsumption",
  });
}

describe("Azure Retail Prices: $filter", () => {
  it("selects meters by `field eq 'value'` terms joined by and (any case), and records each filter", async () => {
    await using azure = await startAzurePricesFake();
    seed(azure);
    const filter =
      "serviceName eq 'Virtual Machines' and armRegionName eq 'eastus' AND skuName eq 'ND96isr H100 v5 Spot'";
    const res = await prices(azure, filter);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    const page = (await res.json()) as AzurePage;
    expect(page).toMatchObject({ BillingCurrency: "USD", NextPageLink: null, Count: 1 });
    expect(page.Items).toEqual([
      expect.objectContaining({
        armRegionName: "eastus",
        armSkuName: "Standard_ND96isr_H100_v5",
        skuName: "ND96isr H100 v5 Spot",
        meterName: "H100 v5 Spot",
        productName: "Virtual Machines NDsr H100 v5 Series",
        serviceName: "Virtual Machines",
        retailPrice: 28.5,
        unitPrice: 28.5,
        currencyCode: "USD",
        unitOfMeasure: "1 Hour",
        type: "Consumption",
      }),
    ]);
    // Filtered as `priceType`, sent as `type`, as the real API names them.
    const devTest = (await (
      await prices(azure, "priceType eq 'DevTestConsumption'")
    ).json()) as AzurePage;
    expect(names(devTest)).toEqual(["westeurope ND96isr H100 v5 Spot"]);
    expect(devTest.Items[0]!.type).toBe("DevTestConsumption");
    // No filter: every meter. A term nothing matches: none.
    expect(((await (await prices(azure)).json()) as AzurePage).Count).toBe(3);
    expect(
      ((await (await prices(azure, "armRegionName eq 'japaneast'")).json()) as AzurePage).Items,
    ).toEqual([]);
    expect(azure.filters()).toEqual([
      filter,
      "priceType eq 'DevTestConsumption'",
      "",
      "armRegionName eq 'japaneast'",
    ]);
  });

  it("answers OData it does not support with 400 BadRequest, as the real API does", async () => {
    await using azure = await startAzurePricesFake();
    seed(azure);
    for (const filter of [
      "contains(skuName, 'Spot')",
      "retailPrice gt 10",
      "armRegionName eq eastus",
      "armRegionName eq 'eastus' or armRegionName eq 'westeurope'",
      "armRegionName eq 'eastus' and",
    ]) {
      const res = await prices(azure, filter);
      expect(res.status, filter).toBe(400);
      expect(await res.json(), filter).toEqual({
        Error: { Code: "BadRequest", Message: "Invalid OData parameters supplied" },
      });
    }
  });

  it("answers 404 off the prices path", async () => {
    await using azure = await startAzurePricesFake();
    expect((await fetch(`${azure.url}/api/retail/other`)).status).toBe(404);
  });

  it("replaces a meter set again for the same region, SKU name and product", async () => {
    await using azure = await startAzurePricesFake();
    seed(azure);
    azure.setMeter({
      armRegionName: "eastus",
      armSkuName: "Standard_ND96isr_H100_v5",
      skuName: "ND96isr H100 v5 Spot",
      productName: "Virtual Machines NDsr H100 v5 Series",
      retailPrice: "not a number",
    });
    const page = (await (await prices(azure, "armRegionName eq 'eastus'")).json()) as AzurePage;
    expect(page.Items.map((i) => [i.skuName, i.retailPrice])).toEqual([
      ["ND96isr H100 v5 Spot", "not a number"],
      ["ND96isr H100 v5 Low Priority", 30],
    ]);
  });
});

describe("Azure Retail Prices: paging", () => {
  it("links pages by an absolute NextPageLink that keeps the filter, null on the last", async () => {
    await using azure = await startAzurePricesFake({ pageSize: 2 });
    for (let i = 0; i < 5; i++) {
      azure.setMeter({
        armRegionName: "eastus",
        armSkuName: `Standard_NC${i}`,
        skuName: `NC${i} Spot`,
        productName: "Virtual Machines NC Series",
        retailPrice: i,
      });
    }
    azure.setMeter({
      armRegionName: "westus",
      armSkuName: "Standard_NC9",
      skuName: "NC9 Spot",
      productName: "Virtual Machines NC Series",
      retailPrice: 9,
    });
    const filter = "armRegionName eq 'eastus'";
    const pages: string[][] = [];
    const links: string[] = [];
    let res = await prices(azure, filter);
    for (;;) {
      const page = (await res.json()) as AzurePage;
      pages.push(page.Items.map((i) => i.skuName));
      expect(page.Count).toBe(page.Items.length);
      if (page.NextPageLink === null) break;
      links.push(page.NextPageLink);
      res = await fetch(page.NextPageLink);
    }
    expect(pages).toEqual([["NC0 Spot", "NC1 Spot"], ["NC2 Spot", "NC3 Spot"], ["NC4 Spot"]]);
    expect(links).toHaveLength(2);
    for (const link of links) {
      const url = new URL(link);
      expect(url.origin).toBe(azure.url);
      expect(url.searchParams.get("$filter")).toBe(filter);
      expect(url.searchParams.get("api-version")).toBe("2023-01-01-preview");
    }
    expect(azure.filters()).toEqual([filter, filter, filter]);
    expect(azure.stats()).toEqual({ requests: 3, faulted: 0 });
    // A last page that is exactly full links to nothing.
    await using exact = await startAzurePricesFake({ pageSize: 5 });
    for (let i = 0; i < 5; i++) {
      exact.setMeter({
        armRegionName: "eastus",
        armSkuName: `Standard_NC${i}`,
        skuName: `NC${i} Spot`,
        productName: "Virtual Machines NC Series",
        retailPrice: i,
      });
    }
    const full = (await (await prices(exact, filter)).json()) as AzurePage;
    expect([full.Count, full.NextPageLink]).toEqual([5, null]);
  });
});

describe("Azure Retail Prices: faults", () => {
  const cases = [
    ["throttle", 429, { Error: { Code: "TooManyRequests" } }],
    ["auth", 401, { Error: { Code: "Unauthorized" } }],
    ["down", 503, { Error: { Code: "ServiceUnavailable" } }],
  ] as const;
  for (const [kind, status, body] of cases) {
    it(`${kind}: ${status} with Azure's error body for the next request, then answers`, async () => {
      await using azure = await startAzurePricesFake();
      seed(azure);
      azure.fail(kind);
      const res = await prices(azure, "armRegionName eq 'eastus'");
      expect(res.status).toBe(status);
      expect(await res.json()).toEqual(body);
      expect((await prices(azure, "armRegionName eq 'eastus'")).status).toBe(200);
      expect(azure.stats()).toEqual({ requests: 2, faulted: 1 });
    });
  }

  it("malformed: a 200 whose JSON is cut off", async () => {
    await using azure = await startAzurePricesFake();
    seed(azure);
    azure.fail("malformed");
    const res = await prices(azure);
    expect(res.status).toBe(200);
    await expect(res.json()).rejects.toThrow(SyntaxError);
  });

  it("a fault comes before the filter is checked, and the filter is still recorded", async () => {
    await using azure = await startAzurePricesFake();
    azure.fail("throttle");
    expect((await prices(azure, "retailPrice gt 1")).status).toBe(429);
    expect(azure.filters()).toEqual(["retailPrice gt 1"]);
  });
});
