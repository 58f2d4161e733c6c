import { describe, expect, it } from "vitest";
import { startEc2Fake } from "@zml/cloud-sim";
import { createAwsSpotSource, PriceSourceError } from "../src/index.ts";
import { account, secretDir, target, TEST_AWS_KEYS } from "./helpers.ts";

const signal = new AbortController().signal;

describe("AWS spot prices through @aws-sdk/client-ec2 against a local EC2 Query endpoint", () => {
  it("pages through DescribeSpotPriceHistory, filtered by type, zone and product, per GPU-hour", async () => {
    await using ec2 = await startEc2Fake({ pageSize: 2 });
    await using secrets = await secretDir();
    for (const [zone, price] of [
      ["us-east-1a", 24],
      ["us-east-1b", 32],
      ["us-east-1c", 40],
    ] as const) {
      ec2.setSpotPrice({ instanceType: "p5.48xlarge", availabilityZone: zone, price });
    }
    ec2.setSpotPrice({ instanceType: "p4d.24xlarge", availabilityZone: "us-east-1a", price: 8 });
    ec2.setSpotPrice({ instanceType: "p5.48xlarge", availabilityZone: "us-west-2a", price: 1 });
    ec2.setSpotPrice({
      instanceType: "p5.48xlarge",
      availabilityZone: "us-east-1a",
      price: 2,
      productDescription: "Windows",
    });
    const path = await secrets.file("aws.json", TEST_AWS_KEYS);
    const source = createAwsSpotSource({ endpoint: ec2.url, maxAttempts: 1 });
    const result = await source.fetch(
      account({ credentials: { kind: "secret_file", path } }),
      [
        target("zoned", { zone: "us-east-1b" }),
        target("regional"),
        target("a100", { instanceType: "p4d.24xlarge" }),
      ],
      signal,
    );
    expect(result.problems).toEqual([]);
    const byNode = Object.fromEntries(result.quotes.map((q) => [q.nodeId, q.usdPerGpuHour]));
    // zoned: its zone; regional: the dearest zone of the region (never underestimated).
    expect(byNode).toEqual({ zoned: 4, regional: 5, a100: 1 });
    const calls = ec2.calls();
    expect(calls.length).toBeGreaterThan(1); // paginated
    expect(calls[0]).toMatchObject({
      action: "DescribeSpotPriceHistory",
      region: "us-east-1",
      accessKeyId: TEST_AWS_KEYS.access_key_id,
      productDescriptions: ["Linux/UNIX"],
    });
    expect(calls[0]!.instanceTypes.sort()).toEqual(["p4d.24xlarge", "p5.48xlarge"]);
    expect(calls.slice(1).every((c) => c.nextToken !== undefined)).toBe(true);
  });

  it("filters by availability zone when every node names one", async () => {
    await using ec2 = await startEc2Fake();
    await using secrets = await secretDir();
    ec2.setSpotPrice({ instanceType: "p5.48xlarge", availabilityZone: "us-east-1a", price: 16 });
    const source = createAwsSpotSource({ endpoint: ec2.url, maxAttempts: 1 });
    const path = await secrets.file("aws.json", TEST_AWS_KEYS);
    await source.fetch(
      account({ credentials: { kind: "secret_file", path } }),
      [target("n", { zone: "us-east-1a" })],
      signal,
    );
    expect(ec2.calls()[0]!.availabilityZones).toEqual(["us-east-1a"]);
  });

  it("retries throttling inside the SDK, and reports it once the attempts are spent", async () => {
    await using ec2 = await startEc2Fake();
    await using secrets = await secretDir();
    ec2.setSpotPrice({ instanceType: "p5.48xlarge", availabilityZone: "us-east-1a", price: 16 });
    const path = await secrets.file("aws.json", TEST_AWS_KEYS);
    const acct = account({ credentials: { kind: "secret_file", path } });
    const source = createAwsSpotSource({ endpoint: ec2.url, maxAttempts: 2 });

    ec2.fail("throttle", 1);
    const ok = await source.fetch(acct, [target("n")], signal);
    expect(ok.quotes.map((q) => q.usdPerGpuHour)).toEqual([2]);
    expect(ec2.stats()).toMatchObject({ faulted: 1 });

    ec2.fail("throttle", 5);
    const err = await source.fetch(acct, [target("n")], signal).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PriceSourceError);
    expect(err).toMatchObject({ kind: "throttled", retryable: true });
  }, 20_000);

  it("expired credentials, malformed XML and an unknown instance type each get their kind", async () => {
    await using ec2 = await startEc2Fake();
    await using secrets = await secretDir();
    ec2.setSpotPrice({ instanceType: "p5.48xlarge", availabilityZone: "us-east-1a", price: 16 });
    const path = await secrets.file("aws.json", TEST_AWS_KEYS);
    const acct = account({ credentials: { kind: "secret_file", path } });
    const source = createAwsSpotSource({ endpoint: ec2.url, maxAttempts: 1 });

    ec2.fail("auth", 1);
    await expect(source.fetch(acct, [target("n")], signal)).rejects.toMatchObject({ kind: "auth" });
    ec2.fail("malformed", 1);
    await expect(source.fetch(acct, [target("n")], signal)).rejects.toMatchObject({
      kind: "malformed",
    });

    ec2.setUnknownInstanceTypes(["p9.huge"]);
    const mixed = await source.fetch(
      acct,
      [target("n"), target("typo", { instanceType: "p9.huge" })],
      signal,
    );
    expect(mixed.quotes.map((q) => q.nodeId)).toEqual(["n"]);
    expect(mixed.problems.map((p) => [p.nodeId, p.error.kind])).toEqual([
      ["typo", "unknown_instance_type"],
    ]);
  });

  it("negative, zero and absurd prices are problems of their node, not of the call", async () => {
    await using ec2 = await startEc2Fake();
    await using secrets = await secretDir();
    ec2.setSpotPrice({
      instanceType: "p5.48xlarge",
      availabilityZone: "us-east-1a",
      price: "-3.1",
    });
    ec2.setSpotPrice({
      instanceType: "p5.48xlarge",
      availabilityZone: "us-east-1b",
      price: "99999",
    });
    ec2.setSpotPrice({
      instanceType: "p5.48xlarge",
      availabilityZone: "us-east-1c",
      price: "0.000000",
    });
    ec2.setSpotPrice({
      instanceType: "p4d.24xlarge",
      availabilityZone: "us-east-1a",
      price: "8.5",
    });
    const path = await secrets.file("aws.json", TEST_AWS_KEYS);
    const source = createAwsSpotSource({ endpoint: ec2.url, maxAttempts: 1 });
    const result = await source.fetch(
      account({ credentials: { kind: "secret_file", path } }),
      [
        target("neg", { zone: "us-east-1a" }),
        target("huge", { zone: "us-east-1b" }),
        target("zero", { zone: "us-east-1c" }),
        target("fine", { zone: "us-east-1a", instanceType: "p4d.24xlarge" }),
        target("none", { zone: "us-east-1d" }),
      ],
      signal,
    );
    expect(result.quotes.map((q) => [q.nodeId, q.usdPerGpuHour])).toEqual([["fine", 1.0625]]);
    expect(result.problems.map((p) => [p.nodeId, p.error.kind])).toEqual([
      ["neg", "bad_price"],
      ["huge", "bad_price"],
      ["zero", "bad_price"],
      ["none", "not_found"],
    ]);
  });

  it("a credentials file that is missing or wrong is a credentials problem that names no secret", async () => {
    await using secrets = await secretDir();
    const source = createAwsSpotSource({ endpoint: "http://127.0.0.1:9", maxAttempts: 1 });
    const bad = await secrets.file("bad.json", {
      access_key_id: "AKIAFAKEFAKEFAKE0001",
      secret_access_key: "short",
    });
    const err = await source
      .fetch(account({ credentials: { kind: "secret_file", path: bad } }), [target("n")], signal)
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "credentials" });
    expect(String((err as Error).message)).not.toContain("short");
    await expect(
      source.fetch(
        account({ credentials: { kind: "secret_file", path: "/nonexistent/aws.json" } }),
        [target("n")],
        signal,
      ),
    ).rejects.toMatchObject({ kind: "credentials" });
    const expired = await secrets.file("old.json", {
      ...TEST_AWS_KEYS,
      expiration: "2020-01-01T00:00:00Z",
    });
    await expect(
      source.fetch(
        account({ credentials: { kind: "secret_file", path: expired } }),
        [target("n")],
        signal,
      ),
    ).rejects.toMatchObject({ kind: "auth" });
  });
});
