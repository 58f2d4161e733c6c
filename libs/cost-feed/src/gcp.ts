import { z } from "zod";
import { readGcpCredential } from "./credentials.ts";
import { PriceSourceError } from "./errors.ts";
import { getJson } from "./http-json.ts";
import type { Fetch } from "./http-json.ts";
import { perGpuHour } from "./normalise.ts";
import type { PriceProblem, PriceQuote, PriceSource } from "./types.ts";

export const GCP_SOURCE = "gcp:CloudBillingCatalog";
export const GCP_BILLING_URL = "https://cloudbilling.googleapis.com";

export interface GcpSpotSourceOptions {
  /** Default {@link GCP_BILLING_URL}. */
  baseUrl?: string | undefined;
  fetch?: Fetch;
  timeoutMs?: number;
  /** The Compute Engine catalog is some tens of thousands of SKUs: 5000 a page, at most 40. */
  maxPages?: number;
}

const MoneySchema = z.object({
  units: z
    .string()
    .regex(/^-?\d+$/)
    .optional(),
  nanos: z.number().int().optional(),
});
const SkuSchema = z.object({
  description: z.string(),
  category: z.object({ resourceGroup: z.string(), usageType: z.string() }),
  serviceRegions: z.array(z.string()),
  pricingInfo: z.array(
    z.object({
      effectiveTime: z.string().optional(),
      pricingExpression: z.object({
        usageUnit: z.string(),
        tieredRates: z.array(z.object({ unitPrice: MoneySchema })),
      }),
    }),
  ),
});
const PageSchema = z.object({
  skus: z.array(SkuSchema).default([]),
  nextPageToken: z.string().optional(),
});
type Sku = z.infer<typeof SkuSchema>;

/**
 * GCP spot prices from the Cloud Billing Catalog API: the Compute Engine service's SKUs,
 * paged; for each node the `Preemptible` (spot) SKU of resource group `GPU` in its region
 * whose description names its `gpu_type`, per GPU-hour already. The credential is an API key
 * or an OAuth access token from the account's secret file.
 */
export function createGcpSpotSource(options: GcpSpotSourceOptions = {}): PriceSource {
  const base = new URL(options.baseUrl ?? GCP_BILLING_URL);
  const fetchFn = options.fetch ?? globalThis.fetch;
  return {
    async fetch(account, targets, signal) {
      if (account.credentials.kind !== "secret_file") {
        throw new PriceSourceError("credentials", "gcp accounts need a secret_file");
      }
      const credential = await readGcpCredential(account.credentials.path);
      const skus = await listGpuSpotSkus(
        fetchFn,
        base,
        account.billing_service,
        credential,
        signal,
        options,
      );
      const quotes: PriceQuote[] = [];
      const problems: PriceProblem[] = [];
      for (const t of targets) {
        if (t.gpuType === undefined) {
          problems.push({
            nodeId: t.nodeId,
            error: new PriceSourceError(
              "config",
              "a gcp node needs cloud.gpu_type (e.g. 'Nvidia H100 80GB')",
            ),
          });
          continue;
        }
        const name = t.gpuType.toLowerCase();
        const matches = skus.filter(
          (s) => s.serviceRegions.includes(t.region) && s.description.toLowerCase().includes(name),
        );
        if (matches.length === 0) {
          problems.push({
            nodeId: t.nodeId,
            error: new PriceSourceError(
              "unknown_instance_type",
              `no spot GPU SKU for '${t.gpuType}' in ${t.region}`,
            ),
          });
          continue;
        }
        try {
          const priced = matches.map((s) => ({
            sku: s,
            usd: perGpuHour(hourlyPrice(s), 1, `${t.gpuType} in ${t.region}`),
          }));
          const dearest = priced.reduce((a, b) => (b.usd > a.usd ? b : a));
          const at = Date.parse(dearest.sku.pricingInfo[0]?.effectiveTime ?? "");
          quotes.push({
            nodeId: t.nodeId,
            usdPerGpuHour: dearest.usd,
            quotedAt: Number.isFinite(at) ? at : undefined,
            source: GCP_SOURCE,
          });
        } catch (err) {
          problems.push({ nodeId: t.nodeId, error: err as PriceSourceError });
        }
      }
      return { quotes, problems };
    },
  };
}

/** The SKU's price per hour: the last tier's unit price (`units` + `nanos` / 1e9). */
function hourlyPrice(sku: Sku): unknown {
  const expression = sku.pricingInfo[0]?.pricingExpression;
  if (expression?.usageUnit !== "h") return `per ${expression?.usageUnit ?? "nothing"}`;
  const price = expression.tieredRates.at(-1)?.unitPrice;
  if (price === undefined) return "no rate";
  return Number(price.units ?? "0") + (price.nanos ?? 0) / 1e9;
}

async function listGpuSpotSkus(
  fetchFn: Fetch,
  base: URL,
  service: string,
  credential: { api_key: string } | { access_token: string },
  signal: AbortSignal,
  options: GcpSpotSourceOptions,
): Promise<Sku[]> {
  const out: Sku[] = [];
  let token = "";
  for (let page = 0; ; page++) {
    if (page >= (options.maxPages ?? 40))
      throw new PriceSourceError("malformed", "Cloud Billing Catalog kept paging");
    const url = new URL(`/v1/services/${encodeURIComponent(service)}/skus`, base);
    url.searchParams.set("pageSize", "5000");
    url.searchParams.set("currencyCode", "USD");
    if (token) url.searchParams.set("pageToken", token);
    // The key rides in the query as Google documents; it is never logged (only `what` is).
    if ("api_key" in credential) url.searchParams.set("key", credential.api_key);
    const headers: Record<string, string> =
      "access_token" in credential ? { authorization: `Bearer ${credential.access_token}` } : {};
    const body = await getJson(fetchFn, url, "Cloud Billing Catalog", {
      headers,
      signal,
      timeoutMs: options.timeoutMs ?? 15_000,
    });
    const parsed = PageSchema.safeParse(body);
    if (!parsed.success)
      throw new PriceSourceError(
        "malformed",
        "Cloud Billing Catalog answered a page that is not a SKU list",
      );
    out.push(
      ...parsed.data.skus.filter(
        (s) => s.category.resourceGroup === "GPU" && s.category.usageType === "Preemptible",
      ),
    );
    token = parsed.data.nextPageToken ?? "";
    if (!token) return out;
  }
}
