/**
 * What a provider client sends and reads, spoken over real HTTP to a fake on loopback.
 * Responses are read from their bytes; nothing here knows the fakes' internals.
 */

export const ACCESS_KEY_ID = "AKIAFAKEFAKEFAKE0001";

export interface Ec2Request {
  /** Form fields after `Action` and `Version`, in order (EC2 list members are `Name.N`). */
  params?: [string, string][];
  action?: string;
  /** The region of the SigV4 credential scope; `null` sends no Authorization header. */
  region?: string | null;
  /** An Authorization header to send as is, instead of a SigV4-shaped one. */
  authorization?: string;
}

/**
 * A DescribeSpotPriceHistory call as the AWS SDK makes it: a form-encoded POST to `/` with
 * `Action`, `Version`, and a SigV4 Authorization header whose credential scope names the
 * region. The fake reads only the scope, so the signature is well-formed but not computed;
 * `ec2-sdk.test.ts` drives the fake with the SDK's real signer.
 */
export async function ec2Post(url: string, request: Ec2Request = {}): Promise<Response> {
  const form = new URLSearchParams([
    ["Action", request.action ?? "DescribeSpotPriceHistory"],
    ["Version", "2016-11-15"],
    ...(request.params ?? []),
  ]);
  const amzDate = "20261206T060000Z";
  const headers: Record<string, string> = {
    "content-type": "application/x-www-form-urlencoded; charset=utf-8",
    "x-amz-date": amzDate,
  };
  const region = request.region === undefined ? "us-east-1" : request.region;
  if (request.authorization !== undefined) headers.authorization = request.authorization;
  else if (region !== null) {
    headers.authorization =
      `AWS4-HMAC-SHA256 Credential=${ACCESS_KEY_ID}/${amzDate.slice(0, 8)}/${region}/ec2/aws4_request, ` +
      `SignedHeaders=content-type;host;x-amz-date, Signature=${"0f".repeat(32)}`;
  }
  return fetch(`${url}/`, { method: "POST", headers, body: form.toString() });
}

/** The text of each `<tag>…</tag>` in `xml`, in order. */
export function xmlAll(xml: string, tag: string): string[] {
  return [...xml.matchAll(new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`, "g"))].map((m) => m[1]!);
}

/** The text of the first `<tag>…</tag>` in `xml`; throws when there is none. */
export function xmlOne(xml: string, tag: string): string {
  const found = xmlAll(xml, tag)[0];
  if (found === undefined) throw new Error(`no <${tag}> in ${xml}`);
  return found;
}

export interface SpotItem {
  instanceType: string;
  productDescription: string;
  spotPrice: string;
  timestamp: string;
  availabilityZone: string;
}

/** The items of a DescribeSpotPriceHistoryResponse and its `nextToken`. */
export function spotPage(xml: string): { items: SpotItem[]; nextToken: string } {
  const items = xmlAll(xmlOne(xml, "spotPriceHistorySet"), "item").map((item) => ({
    instanceType: xmlOne(item, "instanceType"),
    productDescription: xmlOne(item, "productDescription"),
    spotPrice: xmlOne(item, "spotPrice"),
    timestamp: xmlOne(item, "timestamp"),
    availabilityZone: xmlOne(item, "availabilityZone"),
  }));
  return { items, nextToken: xmlOne(xml, "nextToken") };
}

/** The code and message of an EC2 error response (`Response/Errors/Error`). */
export function ec2Error(xml: string): { code: string; message: string } {
  const error = xmlOne(xmlOne(xml, "Errors"), "Error");
  return { code: xmlOne(error, "Code"), message: xmlOne(error, "Message") };
}
