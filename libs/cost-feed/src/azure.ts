import { z } from "zod";
import { PriceSourceError } from "./errors.ts";
import { getJson, sameOrigin } from "./http-json.ts";
import type { Fetch } from "./http-json.ts";
import { perGpuHour } from "./normalise.ts";
import type { PriceProblem, PriceQuote, PriceSource, PriceTarget } from "./types.ts";

export const AZURE_SOURCE = "azure:RetailPrices";
export const AZURE_PRICES_URL = "https://prices.azure.com";

export interface AzureSpotSourceOptions {
  /** Default {@link AZURE_PRICES_URL}. */
  baseUrl?: string | undefined;
  fetch?: Fetch;
  timeoutMs?: number;
  /** Pages followed per lookup at most (a VM size in a region has a handful of meters). */
  maxPages?: number;
}

const PageSchema = z.object({
  Items: z.array(
    z.object({
      retailPrice: z.unknown(),
      skuName: z.string(),
      productName: z.string(),
      unitOfMeasure: z.string(),
      armSkuName: z.string(),
      armRegionName: z.string(),
      effectiveStartDate: z.string().optional(),
    }),
  ),
  NextPageLink: z.string().nullable().optional(),
});
type Meter = z.infer<typeof PageSchema>["Items"][number];

/**
 * Azure spot prices from the public Retail Prices API: for each VM size (`instance_type`,
 * the `armSkuName`) and region of the account's nodes, the Linux spot meter (`skuName`
 * ending in ` Spot`, not a Windows product) of `priceType eq 'Consumption'`, per VM-hour,
 * divided by the node's GPUs. Needs no credentials.
 */
export function createAzureSpotSource(options: AzureSpotSourceOptions = {}): PriceSource {
  const base = new URL(options.baseUrl ?? AZURE_PRICES_URL);
  const fetchFn = options.fetch ?? globalThis.fetch;
  return {
    async fetch(_account, targets, signal) {
      const quotes: PriceQuote[] = [];
      const problems: PriceProblem[] = [];
      // One lookup per (size, region), shared by the nodes of that size there.
      const groups = new Map<string, PriceTarget[]>();
      for (const t of targets) {
        const key = `${t.instanceType} ${t.region}`;
        groups.set(key, [...(groups.get(key) ?? []), t]);
      }
      for (const group of groups.values()) {
        const { instanceType, region } = group[0]!;
        const meters = await listMeters(fetchFn, base, instanceType, region, signal, options);
        const spot = meters.filter(
          (m) =>
            /\sSpot$/.test(m.skuName) &&
            !/Windows/i.test(m.productName) &&
            m.unitOfMeasure === "1 Hour",
        );
        for (const t of group) {
          if (meters.length === 0) {
            problems.push({
              nodeId: t.nodeId,
              error: new PriceSourceError(
                "unknown_instance_type",
                `Azure has no meters for VM size ${instanceType} in ${region}`,
              ),
            });
          } else if (spot.length === 0) {
            problems.push({
              nodeId: t.nodeId,
              error: new PriceSourceError(
                "not_found",
                `Azure has no Linux spot meter for ${instanceType} in ${region}`,
              ),
            });
          } else {
            try {
              // Several spot meters (rare): the dearest, so a node is never priced too low.
              const prices = spot.map((m) =>
                perGpuHour(m.retailPrice, t.gpusPerInstance, `${instanceType} in ${region}`),
              );
              const start = Date.parse(spot[0]!.effectiveStartDate ?? "");
              quotes.push({
                nodeId: t.nodeId,
                usdPerGpuHour: Math.max(...prices),
                quotedAt: Number.isFinite(start) ? start : undefined,
                source: AZURE_SOURCE,
              });
            } catch (err) {
              problems.push({ nodeId: t.nodeId, error: err as PriceSourceError });
            }
          }
        }
      }
      return { quotes, problems };
    },
  };
}

/** Single quotes in OData strings are doubled. */
const odata = (value: string) => `'${value.replaceAll("'", "''")}'`;

async function listMeters(
  fetchFn: Fetch,
  base: URL,
  sku: string,
  region: string,
  signal: AbortSignal,
  options: AzureSpotSourceOptions,
): Promise<Meter[]> {
  const url = new URL("/api/retail/prices", base);
  url.searchParams.set("api-version", "2023-01-01-preview");
  url.searchParams.set(
    "$filter",
    `serviceName eq 'Virtual Machines' and armRegionName eq ${odata(region)} and armSkuName eq ${odata(sku)} and priceType eq 'Consumption'`,
  );
  const meters: Meter[] = [];
  let next: URL | undefined = url;
  for (let page = 0; next !== undefined; page++) {
    if (page >= (options.maxPages ?? 20)) {
      throw new PriceSourceError(
        "malformed",
        `Azure Retail Prices kept paging past ${options.maxPages ?? 20} pages`,
      );
    }
    const body = await getJson(fetchFn, next, "Azure Retail Prices", {
      signal,
      timeoutMs: options.timeoutMs ?? 10_000,
    });
    const parsed = PageSchema.safeParse(body);
    if (!parsed.success)
      throw new PriceSourceError("malformed", "Azure Retail Prices answered a page without Items");
    meters.push(
      ...parsed.data.Items.filter((m) => m.armSkuName === sku && m.armRegionName === region),
    );
    const link = parsed.data.NextPageLink;
    next = link ? sameOrigin(link, base, "Azure Retail Prices") : undefined;
  }
  return meters;
}
