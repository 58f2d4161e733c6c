import { describe, expect, it } from "vitest";
import { parseFleetDocument, planFleetChanges } from "../src/index.ts";

const doc = (node: string, account = "") => `
apiVersion: zml/v1
cloud_accounts:
  - id: aws-main
    provider: aws
    account_id: "123456789012"
    regions: [us-east-1]
    credentials: { kind: role, role_arn: "arn:aws:iam::123456789012:role/zml-cost-feed" }
    refresh_interval_s: 60
    max_price_age_s: 300
${account}
nodes:
  - id: p5-a
    endpoint: http://10.0.0.1:8000
    framework: vllm
    accelerator_family: H100
    tier: 1
    models: [m]
    cloud: ${node}
`;

describe("cloud accounts in the fleet document", () => {
  it("go to their own bucket as references, with the nodes that name them", () => {
    const parsed = parseFleetDocument(
      doc(
        "{ account: aws-main, region: us-east-1, zone: us-east-1a, instance_type: p5.48xlarge, gpus_per_instance: 8, fallback_usd_per_gpu_hour: 6.88 }",
      ),
    );
    expect(parsed.cloud_accounts[0]).toMatchObject({
      id: "aws-main",
      product_description: "Linux/UNIX",
    });
    const changes = planFleetChanges(new Map(), parsed, false);
    const stored = changes.find((c) => c.bucket === "zml_cloud_accounts");
    expect(stored).toMatchObject({ key: "aws-main", action: "create" });
    expect(JSON.parse(stored!.value!)).toMatchObject({ credentials: { kind: "role" } });
  });

  it("reject a node naming an unknown account or a region the account lacks", () => {
    expect(() =>
      parseFleetDocument(
        doc(
          "{ account: nope, region: us-east-1, instance_type: p5.48xlarge, gpus_per_instance: 8 }",
        ),
      ),
    ).toThrow(/nodes\.0\.cloud\.account: unknown cloud account 'nope'/);
    expect(() =>
      parseFleetDocument(
        doc(
          "{ account: aws-main, region: eu-west-1, instance_type: p5.48xlarge, gpus_per_instance: 8 }",
        ),
      ),
    ).toThrow(/nodes\.0\.cloud\.region/);
  });

  it("reject credentials that do not fit the provider and an age limit below the interval", () => {
    const azure = `  - id: az
    provider: azure
    account_id: sub-1
    regions: [eastus]
    credentials: { kind: profile, profile: default }
    refresh_interval_s: 600
    max_price_age_s: 300`;
    expect(() =>
      parseFleetDocument(
        doc(
          "{ account: aws-main, region: us-east-1, instance_type: p5.48xlarge, gpus_per_instance: 8 }",
          azure,
        ),
      ),
    ).toThrow(
      /cloud_accounts\.1\.credentials\.kind: azure's retail prices are public[\s\S]*max_price_age_s/,
    );
  });
});
