import { describe, expect, it } from "vitest";
import { startEc2Fake } from "../src/index.ts";
import type { Ec2Fake } from "../src/index.ts";
import { ACCESS_KEY_ID, ec2Error, ec2Post, spotPage, xmlOne } from "./helpers.ts";

const AT = new Date("2026-12-01T00:00:00.000Z");

/** Prices in two regions, three zones, two types and two products. */
function seed(ec2: Ec2Fake): void {
  const points: [string, string, string, number | string][] = [
    ["p5.48xlarge", "us-east-1a", "Linux/UNIX", 24],
    ["p5.48xlarge", "us-east-1b", "Linux/UNIX", 32.5],
    ["p5.48xlarge", "us-east-1a", "Windows", 40],
    ["p4d.24xlarge", "us-east-1a", "Linux/UNIX", "8.123400"],
    ["p5.48xlarge", "us-west-2a", "Linux/UNIX", 1],
  ];
  for (const [instanceType, availabilityZone, productDescription, price] of points) {
    ec2.setSpotPrice({ instanceType, availabilityZone, productDescription, price, timestamp: AT });
  }
}

const brief = (
  items: { instanceType: string; availabilityZone: string; productDescription: string }[],
) => items.map((i) => `${i.instanceType} ${i.availabilityZone} ${i.productDescription}`);

describe("EC2 DescribeSpotPriceHistory over the Query protocol", () => {
  it("answers a signed form POST with EC2 XML: every price of the signed region, sorted by zone and type", async () => {
    await using ec2 = await startEc2Fake();
    seed(ec2);
    const res = await ec2Post(ec2.url);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/xml/);
    const xml = await res.text();
    expect(xml).toMatch(
      /^<\?xml version="1.0" encoding="UTF-8"\?>\s*<DescribeSpotPriceHistoryResponse xmlns="http:\/\/ec2.amazonaws.com\/doc\/2016-11-15\/">/,
    );
    expect(xmlOne(xml, "requestId")).toMatch(/^[0-9a-f-]{36}$/);
    const page = spotPage(xml);
    expect(page.nextToken).toBe("");
    // us-west-2a is another region's zone: not in a us-east-1 answer.
    expect(page.items).toEqual([
      {
        instanceType: "p4d.24xlarge",
        productDescription: "Linux/UNIX",
        spotPrice: "8.123400",
        timestamp: AT.toISOString(),
        availabilityZone: "us-east-1a",
      },
      expect.objectContaining({ instanceType: "p5.48xlarge", availabilityZone: "us-east-1a" }),
      expect.objectContaining({ instanceType: "p5.48xlarge", availabilityZone: "us-east-1a" }),
      {
        instanceType: "p5.48xlarge",
        productDescription: "Linux/UNIX",
        spotPrice: "32.500000",
        timestamp: AT.toISOString(),
        availabilityZone: "us-east-1b",
      },
    ]);
    const west = spotPage(await (await ec2Post(ec2.url, { region: "us-west-2" })).text());
    expect(brief(west.items)).toEqual(["p5.48xlarge us-west-2a Linux/UNIX"]);
    expect(west.items[0]!.spotPrice).toBe("1.000000");
  });

  it("filters by instance type, product description and zone (AvailabilityZone or an availability-zone Filter)", async () => {
    await using ec2 = await startEc2Fake();
    seed(ec2);
    const items = async (params: [string, string][]) =>
      brief(spotPage(await (await ec2Post(ec2.url, { params })).text()).items);

    expect(await items([["InstanceType.1", "p4d.24xlarge"]])).toEqual([
      "p4d.24xlarge us-east-1a Linux/UNIX",
    ]);
    expect(
      await items([
        ["InstanceType.1", "p5.48xlarge"],
        ["InstanceType.2", "p4d.24xlarge"],
        ["ProductDescription.1", "Windows"],
      ]),
    ).toEqual(["p5.48xlarge us-east-1a Windows"]);
    expect(
      await items([
        ["ProductDescription.1", "Linux/UNIX"],
        ["AvailabilityZone", "us-east-1b"],
      ]),
    ).toEqual(["p5.48xlarge us-east-1b Linux/UNIX"]);
    expect(
      await items([
        ["InstanceType.1", "p5.48xlarge"],
        ["ProductDescription.1", "Linux/UNIX"],
        ["Filter.1.Name", "availability-zone"],
        ["Filter.1.Value.1", "us-east-1a"],
        ["Filter.1.Value.2", "us-east-1b"],
      ]),
    ).toEqual(["p5.48xlarge us-east-1a Linux/UNIX", "p5.48xlarge us-east-1b Linux/UNIX"]);
    // A filter on another name does not narrow the zones.
    expect(
      await items([
        ["InstanceType.1", "p4d.24xlarge"],
        ["Filter.1.Name", "instance-type"],
        ["Filter.1.Value.1", "us-east-1b"],
      ]),
    ).toEqual(["p4d.24xlarge us-east-1a Linux/UNIX"]);
    expect(await items([["InstanceType.1", "g6.xlarge"]])).toEqual([]);
  });

  it("pages by MaxResults (or the fake's pageSize) with an opaque nextToken, empty on the last page", async () => {
    await using ec2 = await startEc2Fake({ pageSize: 3 });
    for (const zone of ["a", "b", "c", "d", "e"]) {
      ec2.setSpotPrice({
        instanceType: "p5.48xlarge",
        availabilityZone: `us-east-1${zone}`,
        price: 1,
      });
    }
    const zonesOf = (xml: string) => spotPage(xml).items.map((i) => i.availabilityZone);

    const pages: string[][] = [];
    const tokens: string[] = [];
    let token: string | undefined;
    do {
      const params: [string, string][] = [["MaxResults", "2"]];
      if (token !== undefined) params.push(["NextToken", token]);
      const xml = await (await ec2Post(ec2.url, { params })).text();
      pages.push(zonesOf(xml));
      token = spotPage(xml).nextToken || undefined;
      if (token !== undefined) tokens.push(token);
    } while (token !== undefined);
    expect(pages).toEqual([
      ["us-east-1a", "us-east-1b"],
      ["us-east-1c", "us-east-1d"],
      ["us-east-1e"],
    ]);
    expect(tokens).toHaveLength(2);
    expect(ec2.calls().map((c) => [c.maxResults, c.nextToken])).toEqual([
      [2, undefined],
      [2, tokens[0]],
      [2, tokens[1]],
    ]);

    // Without MaxResults the fake's pageSize applies.
    const first = await (await ec2Post(ec2.url)).text();
    expect(zonesOf(first)).toEqual(["us-east-1a", "us-east-1b", "us-east-1c"]);
    const rest = await (
      await ec2Post(ec2.url, { params: [["NextToken", spotPage(first).nextToken]] })
    ).text();
    expect(zonesOf(rest)).toEqual(["us-east-1d", "us-east-1e"]);
    expect(spotPage(rest).nextToken).toBe("");

    // A last page that is exactly full has no token.
    const exact = await (await ec2Post(ec2.url, { params: [["MaxResults", "5"]] })).text();
    expect(zonesOf(exact)).toHaveLength(5);
    expect(spotPage(exact).nextToken).toBe("");
  });

  it("refuses an instance type it is told is unknown with InvalidParameterValue naming it", async () => {
    await using ec2 = await startEc2Fake();
    seed(ec2);
    ec2.setUnknownInstanceTypes(["p5.48xlarg"]);
    const res = await ec2Post(ec2.url, {
      params: [
        ["InstanceType.1", "p4d.24xlarge"],
        ["InstanceType.2", "p5.48xlarg"],
      ],
    });
    expect(res.status).toBe(400);
    expect(ec2Error(await res.text())).toEqual({
      code: "InvalidParameterValue",
      message: "Invalid value 'p5.48xlarg' for InstanceType.",
    });
    // A request naming only known types is answered.
    const ok = await ec2Post(ec2.url, { params: [["InstanceType.1", "p4d.24xlarge"]] });
    expect(ok.status).toBe(200);
    // The list is replaced, not added to.
    ec2.setUnknownInstanceTypes([]);
    expect((await ec2Post(ec2.url, { params: [["InstanceType.1", "p5.48xlarg"]] })).status).toBe(
      200,
    );
  });

  it("answers any other action with InvalidAction", async () => {
    await using ec2 = await startEc2Fake();
    const res = await ec2Post(ec2.url, { action: "DescribeInstances" });
    expect(res.status).toBe(400);
    expect(ec2Error(await res.text())).toEqual({
      code: "InvalidAction",
      message: "The action DescribeInstances is not valid for this web service.",
    });
  });

  it("answers a request without a SigV4 credential scope with AuthFailure", async () => {
    await using ec2 = await startEc2Fake();
    seed(ec2);
    const none = await ec2Post(ec2.url, { region: null });
    expect(none.status).toBe(401);
    expect(ec2Error(await none.text()).code).toBe("AuthFailure");
    const basic = await ec2Post(ec2.url, { authorization: "Basic dXNlcjpwYXNz" });
    expect(basic.status).toBe(401);
    expect(ec2Error(await basic.text()).code).toBe("AuthFailure");
    // A scope for another service than ec2 is not EC2's.
    const s3 = await ec2Post(ec2.url, {
      authorization: `AWS4-HMAC-SHA256 Credential=${ACCESS_KEY_ID}/20261206/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00`,
    });
    expect(s3.status).toBe(401);
  });

  it("records each call: action, region and key from the credential scope, lists, zones, paging", async () => {
    await using ec2 = await startEc2Fake();
    await ec2Post(ec2.url, {
      region: "eu-west-1",
      params: [
        ["InstanceType.1", "p5.48xlarge"],
        ["InstanceType.2", "p4d.24xlarge"],
        ["ProductDescription.1", "Linux/UNIX"],
        ["AvailabilityZone", "eu-west-1a"],
        ["Filter.1.Name", "availability-zone"],
        ["Filter.1.Value.1", "eu-west-1b"],
        ["MaxResults", "50"],
        ["NextToken", "abc"],
      ],
    });
    await ec2Post(ec2.url, { region: null, action: "RunInstances" });
    expect(ec2.calls()).toEqual([
      {
        action: "DescribeSpotPriceHistory",
        region: "eu-west-1",
        accessKeyId: ACCESS_KEY_ID,
        instanceTypes: ["p5.48xlarge", "p4d.24xlarge"],
        productDescriptions: ["Linux/UNIX"],
        availabilityZones: ["eu-west-1a", "eu-west-1b"],
        nextToken: "abc",
        maxResults: 50,
      },
      {
        action: "RunInstances",
        region: undefined,
        accessKeyId: undefined,
        instanceTypes: [],
        productDescriptions: [],
        availabilityZones: [],
        nextToken: undefined,
        maxResults: undefined,
      },
    ]);
  });

  it("replaces a price set again for the same type, zone and product", async () => {
    await using ec2 = await startEc2Fake();
    ec2.setSpotPrice({ instanceType: "p5.48xlarge", availabilityZone: "us-east-1a", price: 24 });
    ec2.setSpotPrice({ instanceType: "p5.48xlarge", availabilityZone: "us-east-1a", price: 30 });
    const { items } = spotPage(await (await ec2Post(ec2.url)).text());
    expect(items.map((i) => [i.productDescription, i.spotPrice])).toEqual([
      ["Linux/UNIX", "30.000000"],
    ]);
  });
});

describe("EC2 faults", () => {
  it("throttle: RequestLimitExceeded (503) for the next `times` requests, then answers", async () => {
    await using ec2 = await startEc2Fake();
    seed(ec2);
    ec2.fail("throttle", 2);
    for (let i = 0; i < 2; i++) {
      const res = await ec2Post(ec2.url);
      expect(res.status).toBe(503);
      expect(ec2Error(await res.text()).code).toBe("RequestLimitExceeded");
    }
    expect((await ec2Post(ec2.url)).status).toBe(200);
    expect(ec2.stats()).toEqual({ requests: 3, faulted: 2 });
  });

  it("auth: AuthFailure (401) although the request is signed", async () => {
    await using ec2 = await startEc2Fake();
    ec2.fail("auth");
    const res = await ec2Post(ec2.url);
    expect(res.status).toBe(401);
    expect(ec2Error(await res.text())).toEqual({
      code: "AuthFailure",
      message: "AWS was not able to validate the provided access credentials",
    });
    expect((await ec2Post(ec2.url)).status).toBe(200);
  });

  it("malformed: a 200 whose body is cut-off XML", async () => {
    await using ec2 = await startEc2Fake();
    seed(ec2);
    ec2.fail("malformed");
    const res = await ec2Post(ec2.url);
    expect(res.status).toBe(200);
    const body = await res.text();
    expect(body.startsWith("<DescribeSpotPriceHistoryResponse>")).toBe(true);
    expect(body).not.toContain("</DescribeSpotPriceHistoryResponse>");
    expect(() => spotPage(body)).toThrow(/no <spotPriceHistorySet>/);
  });

  it("down: a 503 Unavailable until healed when failing without end", async () => {
    await using ec2 = await startEc2Fake();
    ec2.fail("down", Infinity);
    for (let i = 0; i < 3; i++) {
      const res = await ec2Post(ec2.url);
      expect(res.status).toBe(503);
      expect(ec2Error(await res.text()).code).toBe("Unavailable");
    }
    ec2.heal();
    expect((await ec2Post(ec2.url)).status).toBe(200);
    expect(ec2.stats()).toEqual({ requests: 4, faulted: 3 });
  });

  it("a fault comes before any check of the request, and the call is still recorded", async () => {
    await using ec2 = await startEc2Fake();
    ec2.fail("throttle");
    const res = await ec2Post(ec2.url, { region: null, action: "Nonsense" });
    expect(ec2Error(await res.text()).code).toBe("RequestLimitExceeded");
    expect(ec2.calls().map((c) => c.action)).toEqual(["Nonsense"]);
  });
});
