import { describe, expect, it } from "vitest";
import {
  AccountSpecSchema,
  ApprovedMeasurementSchema,
  ChatCompletionRequestSchema,
  ConfigKeySchema,
  CostEntrySchema,
  InferRequestSchema,
  KV_BUCKETS,
  QualityScoreSchema,
  RevocationSchema,
} from "../src/index.ts";

const MRTD = "ab".repeat(48);
const firstPath = (r: { success: boolean; error?: { issues: Array<{ path: PropertyKey[] }> } }) =>
  r.success ? null : r.error!.issues[0]!.path.join(".");

describe("configuration documents", () => {
  it("accepts cost entries of both kinds and scopes on-prem ones to exactly one target", () => {
    expect(
      CostEntrySchema.parse({ kind: "on_prem", family: "MI300X", usd_per_gpu_hour: 1.5 }),
    ).toMatchObject({ gpus_per_node: 1 });
    expect(
      CostEntrySchema.safeParse({
        kind: "cloud_spot",
        cloud_account: "aws",
        family: "H100",
        nodes: ["a"],
        usd_per_gpu_hour: 2,
        updated_at: 1,
      }).success,
    ).toBe(true);
    expect(
      firstPath(
        CostEntrySchema.safeParse({
          kind: "on_prem",
          node_id: "a",
          family: "H100",
          usd_per_gpu_hour: 1,
        }),
      ),
    ).toBe("node_id");
    expect(
      firstPath(
        QualityScoreSchema.safeParse({ model: "m", score: 50, source: "s", updated_at: 0 }),
      ),
    ).toBe("node_id");
  });

  it("normalises measurement hex and limits measurements to tiers 3 and 4", () => {
    expect(
      ApprovedMeasurementSchema.parse({
        id: "m",
        model: "x",
        tier: 4,
        mrtd: MRTD.toUpperCase(),
        xfam: "E718060000000000",
      }),
    ).toMatchObject({
      mrtd: MRTD,
      xfam: "e718060000000000",
    });
    expect(
      firstPath(ApprovedMeasurementSchema.safeParse({ id: "m", model: "x", tier: 2, mrtd: MRTD })),
    ).toBe("tier");
    expect(
      firstPath(
        ApprovedMeasurementSchema.safeParse({ id: "m", model: "x", tier: 3, mrtd: MRTD.slice(2) }),
      ),
    ).toBe("mrtd");
  });

  it("requires a revocation to match on something", () => {
    expect(
      RevocationSchema.safeParse({ id: "r", reason: "x", fmspc: "00906ED50000", revoked_at: 0 })
        .success,
    ).toBe(true);
    expect(firstPath(RevocationSchema.safeParse({ id: "r", reason: "x", revoked_at: 0 }))).toBe(
      "node_id",
    );
  });

  it("accepts an account rate limit and rejects a zero one", () => {
    expect(
      AccountSpecSchema.parse({ id: "a", rate_limit: { requests_per_minute: 60, burst: 5 } })
        .rate_limit,
    ).toEqual({ requests_per_minute: 60, burst: 5 });
    expect(
      firstPath(AccountSpecSchema.safeParse({ id: "a", rate_limit: { requests_per_minute: 0 } })),
    ).toBe("rate_limit.requests_per_minute");
  });

  it("keeps config keys usable as KV keys and bucket names distinct", () => {
    expect(ConfigKeySchema.safeParse("aws-prod.H100").success).toBe(true);
    for (const bad of ["", "a b", ".a", "a..b", "a/b", "x".repeat(129)])
      expect(ConfigKeySchema.safeParse(bad).success, bad).toBe(false);
    const names = Object.values(KV_BUCKETS);
    expect(new Set(names).size).toBe(names.length);
  });
});

describe("request bodies", () => {
  const messages = [{ role: "user", content: "hi" }];
  it("keeps header-bound fields to safe characters", () => {
    expect(
      firstPath(
        ChatCompletionRequestSchema.safeParse({
          model: "m",
          messages,
          accelerator_hint: "H100\r\nX: 1",
        }),
      ),
    ).toBe("accelerator_hint");
    expect(
      firstPath(
        ChatCompletionRequestSchema.safeParse({ model: "m", messages, session_id: "a\nb" }),
      ),
    ).toBe("session_id");
    expect(
      ChatCompletionRequestSchema.safeParse({
        model: "m",
        messages,
        accelerator_hint: "MI300X",
        session_id: "s:1",
      }).success,
    ).toBe(true);
  });

  it("makes the native call strict", () => {
    expect(
      InferRequestSchema.safeParse({
        model: "m",
        messages,
        fallback_models: ["n"],
        sort: "quality",
      }).success,
    ).toBe(true);
    expect(firstPath(InferRequestSchema.safeParse({ model: "m", messages, top_k: 3 }))).toBe("");
  });
});
