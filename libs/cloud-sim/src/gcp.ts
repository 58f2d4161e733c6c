import type { IncomingMessage, ServerResponse } from "node:http";
import { send, startFakeServer } from "./http-fake.ts";
import type { CloudFake, FakeCore } from "./http-fake.ts";

/** One SKU of the Cloud Billing Catalog the GCP fake serves. */
export interface GcpSku {
  /** e.g. `Spot Preemptible Nvidia H100 80GB GPU running in Americas`. */
  description: string;
  /** `GPU`, `CPU`, `RAM`, … */
  resourceGroup: string;
  /** `Preemptible` for spot, `OnDemand`, `Commit1Yr`, … */
  usageType: string;
  serviceRegions: string[];
  /** USD per usage unit (an hour); split into `units` and `nanos` as the API does. */
  usdPerHour: number;
  /** Default `h`. */
  usageUnit?: string;
}

export interface GcpFake extends CloudFake {
  setSku(sku: GcpSku): void;
  /** How each request authenticated: `key:<api key>`, `bearer:<token>` or `none`. */
  auths(): readonly string[];
}

/**
 * A local Cloud Billing Catalog API (`GET /v1/services/{service}/skus`): JSON pages of
 * `skus` with `pricingInfo[].pricingExpression.tieredRates[].unitPrice` (`units` + `nanos`),
 * linked by `nextPageToken`; an API key (`?key=`) or OAuth bearer token is required, and the
 * errors are Google's JSON (`UNAUTHENTICATED`, `RESOURCE_EXHAUSTED`).
 */
export async function startGcpBillingFake(
  options: { pageSize?: number; port?: number; service?: string; credential?: string } = {},
): Promise<GcpFake> {
  const skus: GcpSku[] = [];
  const auths: string[] = [];
  const service = options.service ?? "6F81-5844-456A";
  const core = await startFakeServer(
    (req, _body, res, c) =>
      handle(req, res, c, {
        skus,
        auths,
        service,
        credential: options.credential,
        pageSize: options.pageSize ?? 5000,
      }),
    options.port,
  );
  return {
    url: core.url,
    ...core.fake,
    setSku(sku) {
      const i = skus.findIndex((s) => s.description === sku.description);
      if (i >= 0) skus[i] = sku;
      else skus.push(sku);
    },
    auths: () => auths,
  };
}

interface GcpState {
  skus: GcpSku[];
  auths: string[];
  service: string;
  credential: string | undefined;
  pageSize: number;
}

function handle(req: IncomingMessage, res: ServerResponse, core: FakeCore, state: GcpState): void {
  const url = new URL(req.url ?? "/", core.url);
  const key = url.searchParams.get("key");
  const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
  const auth = key !== null ? `key:${key}` : bearer !== undefined ? `bearer:${bearer}` : "none";
  state.auths.push(auth);
  const fault = core.takeFault();
  if (fault === "throttle") return googleError(res, 429, "RESOURCE_EXHAUSTED", "Quota exceeded");
  if (fault === "down")
    return googleError(res, 503, "UNAVAILABLE", "The service is currently unavailable.");
  if (fault === "malformed") return send(res, 200, "application/json", "<html>Proxy error</html>");
  const presented = key ?? bearer;
  if (
    fault === "auth" ||
    presented === undefined ||
    (state.credential !== undefined && presented !== state.credential)
  ) {
    return googleError(
      res,
      401,
      "UNAUTHENTICATED",
      "Request had invalid authentication credentials.",
    );
  }
  const m = /^\/v1\/services\/([^/]+)\/skus$/.exec(url.pathname);
  if (!m || m[1] !== state.service) return googleError(res, 404, "NOT_FOUND", "Service not found.");
  const start = Number(url.searchParams.get("pageToken") || "0");
  // The fake pages no larger than told to, whatever the client asks: paging gets exercised.
  const size = Math.min(Number(url.searchParams.get("pageSize") ?? 5000), state.pageSize);
  const page = state.skus.slice(start, start + size);
  const next = start + size < state.skus.length ? String(start + size) : "";
  json(res, 200, {
    skus: page.map((s, i) => {
      const units = Math.trunc(s.usdPerHour);
      return {
        name: `services/${state.service}/skus/FAKE-${start + i}`,
        skuId: `FAKE-${start + i}`,
        description: s.description,
        category: {
          serviceDisplayName: "Compute Engine",
          resourceFamily: "Compute",
          resourceGroup: s.resourceGroup,
          usageType: s.usageType,
        },
        serviceRegions: s.serviceRegions,
        pricingInfo: [
          {
            summary: "",
            pricingExpression: {
              usageUnit: s.usageUnit ?? "h",
              displayQuantity: 1,
              tieredRates: [
                {
                  startUsageAmount: 0,
                  unitPrice: {
                    currencyCode: "USD",
                    units: String(units),
                    nanos: Math.round((s.usdPerHour - units) * 1e9),
                  },
                },
              ],
              usageUnitDescription: "hour",
              baseUnit: "s",
              baseUnitDescription: "second",
              baseUnitConversionFactor: 3600,
            },
            currencyConversionRate: 1,
            effectiveTime: new Date().toISOString(),
          },
        ],
        serviceProviderName: "Google",
      };
    }),
    nextPageToken: next,
  });
}

function googleError(res: ServerResponse, code: number, status: string, message: string): void {
  json(res, code, { error: { code, message, status } });
}

function json(res: ServerResponse, status: number, body: unknown): void {
  send(res, status, "application/json; charset=UTF-8", JSON.stringify(body));
}
