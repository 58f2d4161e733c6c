import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { send, startFakeServer } from "./http-fake.ts";
import type { CloudFake, FakeCore } from "./http-fake.ts";

/** One spot price the EC2 fake knows: the latest for its instance type, zone and product. */
export interface SpotPricePoint {
  instanceType: string;
  availabilityZone: string;
  productDescription?: string;
  /** USD per instance-hour, as EC2 sends it (a decimal string); a number is formatted. */
  price: number | string;
  /** When the price took effect; default: when it was set. */
  timestamp?: Date;
}

/** What the fake saw of one DescribeSpotPriceHistory call, for assertions. */
export interface Ec2Call {
  action: string | undefined;
  /** From the SigV4 credential scope of the Authorization header. */
  region: string | undefined;
  accessKeyId: string | undefined;
  instanceTypes: string[];
  productDescriptions: string[];
  availabilityZones: string[];
  nextToken: string | undefined;
  maxResults: number | undefined;
}

export interface Ec2Fake extends CloudFake {
  setSpotPrice(point: SpotPricePoint): void;
  /** Instance types EC2 rejects as invalid (InvalidParameterValue), like a typo would be. */
  setUnknownInstanceTypes(types: readonly string[]): void;
  calls(): readonly Ec2Call[];
}

export interface Ec2FakeOptions {
  /** Items per page when the caller sets no MaxResults (EC2's own default is 1000). */
  pageSize?: number;
  port?: number;
}

/**
 * A local EC2 endpoint for `DescribeSpotPriceHistory`, speaking the EC2 Query protocol: a
 * form-encoded POST in, EC2 XML out (`spotPriceHistorySet` items, `nextToken` paging), and
 * EC2's error XML (`RequestLimitExceeded`, `AuthFailure`, `InvalidParameterValue`). Point
 * `@aws-sdk/client-ec2` at it with `endpoint: fake.url`.
 */
export async function startEc2Fake(options: Ec2FakeOptions = {}): Promise<Ec2Fake> {
  const prices = new Map<string, Required<SpotPricePoint>>();
  const unknown = new Set<string>();
  const calls: Ec2Call[] = [];
  const pageSize = options.pageSize ?? 1000;
  const core = await startFakeServer(
    (req, body, res, c) => handle(req, body, res, c, { prices, unknown, calls, pageSize }),
    options.port,
  );
  return {
    url: core.url,
    ...core.fake,
    setSpotPrice(point) {
      const full = {
        productDescription: "Linux/UNIX",
        timestamp: new Date(),
        ...point,
      };
      prices.set(`${full.instanceType} ${full.availabilityZone} ${full.productDescription}`, full);
    },
    setUnknownInstanceTypes(types) {
      unknown.clear();
      for (const t of types) unknown.add(t);
    },
    calls: () => calls,
  };
}

interface Ec2State {
  prices: Map<string, Required<SpotPricePoint>>;
  unknown: Set<string>;
  calls: Ec2Call[];
  pageSize: number;
}

function handle(
  req: IncomingMessage,
  body: string,
  res: ServerResponse,
  core: FakeCore,
  state: Ec2State,
): void {
  const form = new URLSearchParams(body);
  const list = (prefix: string) =>
    [...form.entries()].filter(([k]) => new RegExp(`^${prefix}\\.\\d+$`).test(k)).map(([, v]) => v);
  const filterValues = (name: string) => {
    const out: string[] = [];
    for (const [k, v] of form.entries()) {
      const m = /^Filter\.(\d+)\.Name$/.exec(k);
      if (m && v === name) out.push(...list(`Filter\\.${m[1]}\\.Value`));
    }
    return out;
  };
  const scope = /Credential=([^/]+)\/\d{8}\/([^/]+)\/ec2\//.exec(req.headers.authorization ?? "");
  const call: Ec2Call = {
    action: form.get("Action") ?? undefined,
    region: scope?.[2],
    accessKeyId: scope?.[1],
    instanceTypes: list("InstanceType"),
    productDescriptions: list("ProductDescription"),
    availabilityZones: [
      ...(form.get("AvailabilityZone") ? [form.get("AvailabilityZone")!] : []),
      ...filterValues("availability-zone"),
    ],
    nextToken: form.get("NextToken") ?? undefined,
    maxResults: form.has("MaxResults") ? Number(form.get("MaxResults")) : undefined,
  };
  state.calls.push(call);

  const fault = core.takeFault();
  if (fault === "throttle")
    return error(res, 503, "RequestLimitExceeded", "Request limit exceeded.");
  if (fault === "auth") {
    return error(
      res,
      401,
      "AuthFailure",
      "AWS was not able to validate the provided access credentials",
    );
  }
  if (fault === "down")
    return error(res, 503, "Unavailable", "The service is unavailable. Please try again shortly.");
  if (fault === "malformed")
    return send(res, 200, "text/xml", "<DescribeSpotPriceHistoryResponse><spotPr");
  if (call.action !== "DescribeSpotPriceHistory") {
    return error(
      res,
      400,
      "InvalidAction",
      `The action ${call.action ?? "(none)"} is not valid for this web service.`,
    );
  }
  if (!scope) return error(res, 401, "AuthFailure", "missing or malformed SigV4 authorization");
  const bad = call.instanceTypes.find((t) => state.unknown.has(t));
  if (bad !== undefined) {
    return error(res, 400, "InvalidParameterValue", `Invalid value '${bad}' for InstanceType.`);
  }

  const matching = [...state.prices.values()]
    .filter(
      (p) =>
        p.availabilityZone.startsWith(call.region!) &&
        (call.instanceTypes.length === 0 || call.instanceTypes.includes(p.instanceType)) &&
        (call.productDescriptions.length === 0 ||
          call.productDescriptions.includes(p.productDescription)) &&
        (call.availabilityZones.length === 0 ||
          call.availabilityZones.includes(p.availabilityZone)),
    )
    .sort((a, b) =>
      (a.availabilityZone + a.instanceType).localeCompare(b.availabilityZone + b.instanceType),
    );
  const start =
    call.nextToken === undefined ? 0 : Number(Buffer.from(call.nextToken, "base64url").toString());
  const size = call.maxResults ?? state.pageSize;
  const page = matching.slice(start, start + size);
  const next =
    start + size < matching.length ? Buffer.from(String(start + size)).toString("base64url") : "";
  const items = page
    .map(
      (p) => `      <item>
        <instanceType>${p.instanceType}</instanceType>
        <productDescription>${p.productDescription}</productDescription>
        <spotPrice>${typeof p.price === "number" ? p.price.toFixed(6) : p.price}</spotPrice>
        <timestamp>${p.timestamp.toISOString()}</timestamp>
        <availabilityZone>${p.availabilityZone}</availabilityZone>
      </item>`,
    )
    .join("\n");
  send(
    res,
    200,
    "text/xml;charset=UTF-8",
    `<?xml version="1.0" encoding="UTF-8"?>
<DescribeSpotPriceHistoryResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>${randomUUID()}</requestId>
    <spotPriceHistorySet>
${items}
    </spotPriceHistorySet>
    <nextToken>${next}</nextToken>
</DescribeSpotPriceHistoryResponse>`,
  );
}

function error(res: ServerResponse, status: number, code: string, message: string): void {
  send(
    res,
    status,
    "text/xml;charset=UTF-8",
    `<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>${code}</Code><Message>${message}</Message></Error></Errors><RequestID>${randomUUID()}</RequestID></Response>`,
  );
}
