import type { IncomingMessage, ServerResponse } from "node:http";
import { send, startFakeServer } from "./http-fake.ts";
import type { CloudFake, FakeCore } from "./http-fake.ts";

/** One retail price meter the Azure fake serves (the fields the Retail Prices API sends). */
export interface AzureMeter {
  armRegionName: string;
  armSkuName: string;
  /** e.g. `ND96isr H100 v5 Spot`; the ` Spot` suffix marks spot meters, ` Low Priority` others. */
  skuName: string;
  /** e.g. `Virtual Machines NDsr H100 v5 Series` (Windows meters say so in the name). */
  productName: string;
  /** USD per VM-hour; a string sends a non-number, as a broken proxy might. */
  retailPrice: number | string;
  serviceName?: string;
  priceType?: "Consumption" | "Reservation" | "DevTestConsumption";
  unitOfMeasure?: string;
  effectiveStartDate?: string;
}

export interface AzureFake extends CloudFake {
  setMeter(meter: AzureMeter): void;
  /** The `$filter` of each request, in order. */
  filters(): readonly string[];
}

/**
 * A local Azure Retail Prices API (`GET /api/retail/prices?$filter=…`): JSON pages of
 * `Items` linked by an absolute `NextPageLink`, `$filter` conditions of the form
 * `field eq 'value'` joined by `and` (anything else is a 400, as the real API answers).
 */
export async function startAzurePricesFake(
  options: { pageSize?: number; port?: number } = {},
): Promise<AzureFake> {
  const meters: Required<AzureMeter>[] = [];
  const filters: string[] = [];
  const pageSize = options.pageSize ?? 100;
  const core = await startFakeServer(
    (req, _body, res, c) => handle(req, res, c, { meters, filters, pageSize }),
    options.port,
  );
  return {
    url: core.url,
    ...core.fake,
    setMeter(meter) {
      const full: Required<AzureMeter> = {
        serviceName: "Virtual Machines",
        priceType: "Consumption",
        unitOfMeasure: "1 Hour",
        effectiveStartDate: "2024-05-01T00:00:00Z",
        ...meter,
      };
      const i = meters.findIndex(
        (m) =>
          m.armRegionName === full.armRegionName &&
          m.skuName === full.skuName &&
          m.productName === full.productName,
      );
      if (i >= 0) meters[i] = full;
      else meters.push(full);
    },
    filters: () => filters,
  };
}

function handle(
  req: IncomingMessage,
  res: ServerResponse,
  core: FakeCore,
  state: { meters: Required<AzureMeter>[]; filters: string[]; pageSize: number },
): void {
  const url = new URL(req.url ?? "/", core.url);
  if (url.pathname !== "/api/retail/prices") return json(res, 404, { error: "not found" });
  const filter = url.searchParams.get("$filter") ?? "";
  state.filters.push(filter);
  const fault = core.takeFault();
  if (fault === "throttle") return json(res, 429, { Error: { Code: "TooManyRequests" } });
  if (fault === "auth") return json(res, 401, { Error: { Code: "Unauthorized" } });
  if (fault === "down") return json(res, 503, { Error: { Code: "ServiceUnavailable" } });
  if (fault === "malformed") return send(res, 200, "application/json", '{"Items": [{"retailPr');
  const conditions: [string, string][] = [];
  for (const part of filter === "" ? [] : filter.split(/\s+and\s+/i)) {
    const m = /^\s*(\w+)\s+eq\s+'([^']*)'\s*$/.exec(part);
    if (!m)
      return json(res, 400, {
        Error: { Code: "BadRequest", Message: "Invalid OData parameters supplied" },
      });
    conditions.push([m[1]!, m[2]!]);
  }
  const matching = state.meters.filter((m) =>
    conditions.every(([k, v]) => String((m as unknown as Record<string, unknown>)[k]) === v),
  );
  const skip = Number(url.searchParams.get("$skip") ?? "0");
  const page = matching.slice(skip, skip + state.pageSize);
  let next: string | null = null;
  if (skip + state.pageSize < matching.length) {
    const link = new URL(url);
    link.searchParams.set("$skip", String(skip + state.pageSize));
    next = link.toString();
  }
  json(res, 200, {
    BillingCurrency: "USD",
    CustomerEntityId: "Default",
    CustomerEntityType: "Retail",
    Items: page.map((m) => ({
      currencyCode: "USD",
      tierMinimumUnits: 0,
      retailPrice: m.retailPrice,
      unitPrice: m.retailPrice,
      armRegionName: m.armRegionName,
      location: m.armRegionName,
      effectiveStartDate: m.effectiveStartDate,
      meterId: `${m.armSkuName}-${m.skuName}`.replace(/\s+/g, "-"),
      meterName: m.skuName.replace(/^\S+\s/, ""),
      productId: "DZH318Z0BQ4P",
      skuId: "DZH318Z0BQ4P/00G1",
      productName: m.productName,
      skuName: m.skuName,
      serviceName: m.serviceName,
      serviceId: "DZH313Z7MMC8",
      serviceFamily: "Compute",
      unitOfMeasure: m.unitOfMeasure,
      type: m.priceType,
      isPrimaryMeterRegion: true,
      armSkuName: m.armSkuName,
    })),
    NextPageLink: next,
    Count: page.length,
  });
}

function json(res: ServerResponse, status: number, body: unknown): void {
  send(res, status, "application/json; charset=utf-8", JSON.stringify(body));
}
