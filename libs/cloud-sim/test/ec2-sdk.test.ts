// @aws-sdk/client-ec2 is libs/cost-feed's dependency, installed at the repository root; this
// test borrows it to show the fake answers the real client (SigV4 signing, Query protocol
// serialisation, XML parsing, paging) without declaring it for cloud-sim.
import {
  DescribeSpotPriceHistoryCommand,
  EC2Client,
  paginateDescribeSpotPriceHistory,
} from "@aws-sdk/client-ec2";
import { describe, expect, it } from "vitest";
import { startEc2Fake } from "../src/index.ts";
import { ACCESS_KEY_ID } from "./helpers.ts";

const AT = new Date("2026-12-01T00:00:00.000Z");

function client(url: string, region = "us-east-1"): EC2Client {
  return new EC2Client({
    region,
    endpoint: url,
    maxAttempts: 1,
    credentials: { accessKeyId: ACCESS_KEY_ID, secretAccessKey: "fake/secret/for/the/local/fake" },
  });
}

describe("EC2 fake driven by @aws-sdk/client-ec2", () => {
  it("pages DescribeSpotPriceHistory through the SDK's paginator, with filters, and the SDK parses every item", async () => {
    await using ec2 = await startEc2Fake({ pageSize: 2 });
    for (const zone of ["a", "b", "c"]) {
      ec2.setSpotPrice({
        instanceType: "p5.48xlarge",
        availabilityZone: `eu-west-1${zone}`,
        price: 20 + zone.charCodeAt(0) - 97,
        timestamp: AT,
      });
    }
    ec2.setSpotPrice({
      instanceType: "p4d.24xlarge",
      availabilityZone: "eu-west-1a",
      price: 9,
      timestamp: AT,
    });
    const ec2Client = client(ec2.url, "eu-west-1");
    try {
      const seen: string[] = [];
      for await (const page of paginateDescribeSpotPriceHistory(
        { client: ec2Client },
        {
          InstanceTypes: ["p5.48xlarge"],
          ProductDescriptions: ["Linux/UNIX"],
          Filters: [{ Name: "availability-zone", Values: ["eu-west-1a", "eu-west-1c"] }],
        },
      )) {
        for (const p of page.SpotPriceHistory ?? []) {
          expect(p.Timestamp).toEqual(AT);
          seen.push(
            `${p.InstanceType} ${p.AvailabilityZone} ${p.ProductDescription} ${p.SpotPrice}`,
          );
        }
      }
      expect(seen).toEqual([
        "p5.48xlarge eu-west-1a Linux/UNIX 20.000000",
        "p5.48xlarge eu-west-1c Linux/UNIX 22.000000",
      ]);

      // Three prices at two a page: the paginator follows the fake's nextToken.
      const all: string[] = [];
      for await (const page of paginateDescribeSpotPriceHistory(
        { client: ec2Client },
        { InstanceTypes: ["p5.48xlarge"] },
      )) {
        all.push(...(page.SpotPriceHistory ?? []).map((p) => p.AvailabilityZone ?? "?"));
      }
      expect(all).toEqual(["eu-west-1a", "eu-west-1b", "eu-west-1c"]);
    } finally {
      ec2Client.destroy();
    }
    const calls = ec2.calls();
    expect(calls[0]).toEqual({
      action: "DescribeSpotPriceHistory",
      region: "eu-west-1",
      accessKeyId: ACCESS_KEY_ID,
      instanceTypes: ["p5.48xlarge"],
      productDescriptions: ["Linux/UNIX"],
      availabilityZones: ["eu-west-1a", "eu-west-1c"],
      nextToken: undefined,
      maxResults: undefined,
    });
    expect(calls.slice(1).map((c) => c.nextToken !== undefined)).toEqual([false, true]);
    expect(ec2.stats()).toEqual({ requests: 3, faulted: 0 });
  });

  it("surfaces the fake's EC2 errors as the SDK's named errors", async () => {
    await using ec2 = await startEc2Fake();
    const ec2Client = client(ec2.url);
    const send = () =>
      ec2Client.send(new DescribeSpotPriceHistoryCommand({ InstanceTypes: ["p6-b200.48xlarge"] }));
    try {
      ec2.fail("throttle");
      await expect(send()).rejects.toMatchObject({
        name: "RequestLimitExceeded",
        $metadata: { httpStatusCode: 503 },
      });
      ec2.fail("auth");
      await expect(send()).rejects.toMatchObject({
        name: "AuthFailure",
        $metadata: { httpStatusCode: 401 },
      });
      // Healed: the same request is answered (an empty history).
      expect((await send()).SpotPriceHistory).toEqual([]);
      // A type the SDK knows that this region's EC2 does not.
      ec2.setUnknownInstanceTypes(["p6-b200.48xlarge"]);
      await expect(send()).rejects.toMatchObject({
        name: "InvalidParameterValue",
        message: "Invalid value 'p6-b200.48xlarge' for InstanceType.",
      });
    } finally {
      ec2Client.destroy();
    }
  });
});
