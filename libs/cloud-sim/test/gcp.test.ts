import { describe, expect, it } from "vitest";
import { startGcpBillingFake } from "../src/index.ts";
import type { GcpFake } from "../src/index.ts";

const COMPUTE = "6F81-5844-456A";

interface SkuPage {
  skus: {
    name: string;
    skuId: string;
    description: string;
    category: { resourceGroup: string; usageType: string };
    serviceRegions: string[];
    pricingInfo: {
      pricingExpression: {
        usageUnit: string;
        tieredRates: { unitPrice: { currencyCode: string; units: string; nanos: number } }[];
      };
    }[];
  }[];
  nextPageToken: string;
}

interface GoogleError {
  error: { code: number; message: string; status: string };
}

/** A catalog read as the cost feed makes it: an API key in the query, or a bearer token. */
function skus(
  fake: GcpFake,
  options: {
    key?: string;
    bearer?: string;
    pageToken?: string;
    pageSize?: number;
    service?: string;
  } = {},
): Promise<Response> {
  const url = new URL(`/v1/services/${options.service ?? COMPUTE}/skus`, fake.url);
  if (options.key !== undefined) url.searchParams.set("key", options.key);
  if (options.pageToken !== undefined) url.searchParams.set("pageToken", options.pageToken);
  if (options.pageSize !== undefined) url.searchParams.set("pageSize", String(options.pageSize));
  const headers: Record<string, string> =
    options.bearer === undefined ? {} : { authorization: `Bearer ${options.bearer}` };
  return fetch(url, { headers });
}

function seed(fake: GcpFake, n: number): void {
  for (let i = 0; i < n; i++) {
    fake.setSku({
      description: `Spot Preemptible Nvidia H100 80GB GPU running in Region ${i}`,
      resourceGroup: "GPU",
      usageType: "Preemptible",
      serviceRegions: [`region-${i}`],
      usdPerHour: 2 + i / 4,
    });
  }
}

describe("GCP Cloud Billing Catalog: SKUs", () => {
  it("lists SKUs with the price split into units and nanos per usage unit", async () => {
    await using gcp = await startGcpBillingFake();
    gcp.setSku({
      description: "Spot Preemptible Nvidia H100 80GB GPU running in Americas",
      resourceGroup: "GPU",
      usageType: "Preemptible",
      serviceRegions: ["us-central1", "us-east4"],
      usdPerHour: 2.253,
    });
    const res = await skus(gcp, { key: "api-key-1" });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    const page = (await res.json()) as SkuPage;
    expect(page.nextPageToken).toBe("");
    expect(page.skus).toHaveLength(1);
    const sku = page.skus[0]!;
    expect(sku).toMatchObject({
      name: `services/${COMPUTE}/skus/${sku.skuId}`,
      description: "Spot Preemptible Nvidia H100 80GB GPU running in Americas",
      category: { resourceGroup: "GPU", usageType: "Preemptible" },
      serviceRegions: ["us-central1", "us-east4"],
    });
    const expression = sku.pricingInfo[0]!.pricingExpression;
    expect(expression.usageUnit).toBe("h");
    expect(expression.tieredRates[0]!.unitPrice).toEqual({
      currencyCode: "USD",
      units: "2",
      nanos: 253_000_000,
    });
  });

  it("replaces a SKU set again with the same description", async () => {
    await using gcp = await startGcpBillingFake();
    seed(gcp, 2);
    gcp.setSku({
      description: "Spot Preemptible Nvidia H100 80GB GPU running in Region 0",
      resourceGroup: "GPU",
      usageType: "Preemptible",
      serviceRegions: ["region-0"],
      usdPerHour: 7,
      usageUnit: "mo",
    });
    const page = (await (await skus(gcp, { key: "k" })).json()) as SkuPage;
    expect(page.skus).toHaveLength(2);
    expect(page.skus[0]!.pricingInfo[0]!.pricingExpression).toMatchObject({
      usageUnit: "mo",
      tieredRates: [{ unitPrice: { units: "7", nanos: 0 } }],
    });
  });

  it("needs an API key or a bearer token, the configured one when set, and records which came", async () => {
    await using gcp = await startGcpBillingFake({ credential: "right" });
    seed(gcp, 1);
    const unauthenticated = {
      error: {
        code: 401,
        status: "UNAUTHENTICATED",
        message: "Request had invalid authentication credentials.",
      },
    };
    const none = await skus(gcp);
    expect(none.status).toBe(401);
    expect(await none.json()).toEqual(unauthenticated);
    const wrong = await skus(gcp, { key: "wrong" });
    expect(wrong.status).toBe(401);
    expect(await wrong.json()).toEqual(unauthenticated);
    expect((await skus(gcp, { key: "right" })).status).toBe(200);
    expect((await skus(gcp, { bearer: "right" })).status).toBe(200);
    expect((await skus(gcp, { bearer: "wrong" })).status).toBe(401);
    expect(gcp.auths()).toEqual(["none", "key:wrong", "key:right", "bearer:right", "bearer:wrong"]);
  });

  it("answers NOT_FOUND for another service than the one it serves", async () => {
    await using gcp = await startGcpBillingFake();
    const res = await skus(gcp, { key: "k", service: "0000-0000-0000" });
    expect(res.status).toBe(404);
    expect(((await res.json()) as GoogleError).error).toMatchObject({
      code: 404,
      status: "NOT_FOUND",
    });
    await using other = await startGcpBillingFake({ service: "0000-0000-0000" });
    expect((await skus(other, { key: "k", service: "0000-0000-0000" })).status).toBe(200);
  });
});

describe("GCP Cloud Billing Catalog: paging", () => {
  it("pages by nextPageToken at the smaller of the client's pageSize and its own, empty on the last", async () => {
    await using gcp = await startGcpBillingFake({ pageSize: 3 });
    seed(gcp, 7);
    const read = async (pageSize?: number, fake: GcpFake = gcp) => {
      const pages: string[][] = [];
      let pageToken: string | undefined;
      do {
        const res = await skus(fake, {
          key: "k",
          ...(pageToken === undefined ? {} : { pageToken }),
          ...(pageSize === undefined ? {} : { pageSize }),
        });
        const page = (await res.json()) as SkuPage;
        pages.push(page.skus.map((s) => s.serviceRegions[0]!));
        pageToken = page.nextPageToken || undefined;
      } while (pageToken !== undefined);
      return pages;
    };
    // Asking for 5000 still gets pages of 3: paging is exercised whatever the client asks.
    expect(await read(5000)).toEqual([
      ["region-0", "region-1", "region-2"],
      ["region-3", "region-4", "region-5"],
      ["region-6"],
    ]);
    expect(await read(2)).toEqual([
      ["region-0", "region-1"],
      ["region-2", "region-3"],
      ["region-4", "region-5"],
      ["region-6"],
    ]);
    expect((await read()).map((p) => p.length)).toEqual([3, 3, 1]);
    expect(gcp.stats()).toEqual({ requests: 10, faulted: 0 });
    // A last page that is exactly full has no token.
    await using exact = await startGcpBillingFake({ pageSize: 3 });
    seed(exact, 6);
    expect((await read(undefined, exact)).map((p) => p.length)).toEqual([3, 3]);
  });
});

describe("GCP Cloud Billing Catalog: faults", () => {
  const cases = [
    ["throttle", 429, "RESOURCE_EXHAUSTED"],
    ["auth", 401, "UNAUTHENTICATED"],
    ["down", 503, "UNAVAILABLE"],
  ] as const;
  for (const [kind, status, googleStatus] of cases) {
    it(`${kind}: ${status} ${googleStatus} in Google's JSON although the key is good, then answers`, async () => {
      await using gcp = await startGcpBillingFake({ credential: "k" });
      seed(gcp, 1);
      gcp.fail(kind, 2);
      for (let i = 0; i < 2; i++) {
        const res = await skus(gcp, { key: "k" });
        expect(res.status).toBe(status);
        expect(((await res.json()) as GoogleError).error).toMatchObject({
          code: status,
          status: googleStatus,
        });
      }
      expect((await skus(gcp, { key: "k" })).status).toBe(200);
      expect(gcp.stats()).toEqual({ requests: 3, faulted: 2 });
    });
  }

  it("malformed: a 200 that says JSON and is an HTML proxy page", async () => {
    await using gcp = await startGcpBillingFake();
    seed(gcp, 1);
    gcp.fail("malformed");
    const res = await skus(gcp, { key: "k" });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await res.clone().text()).toBe("<html>Proxy error</html>");
    await expect(res.json()).rejects.toThrow(SyntaxError);
  });
});
