import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CloudAccountSpecSchema } from "@zml/contracts";
import type { CloudAccountSpec } from "@zml/contracts";
import type { PriceTarget } from "../src/index.ts";

/** A temp dir holding secret files, removed on dispose. */
export async function secretDir() {
  const dir = await mkdtemp(join(tmpdir(), "zml-cost-feed-"));
  return {
    async file(name: string, content: unknown): Promise<string> {
      const path = join(dir, name);
      await writeFile(path, typeof content === "string" ? content : JSON.stringify(content), {
        mode: 0o600,
      });
      return path;
    },
    [Symbol.asyncDispose]: () => rm(dir, { recursive: true, force: true }),
  };
}

export const TEST_AWS_KEYS = {
  access_key_id: "AKIAFAKEFAKEFAKE0001",
  secret_access_key: "fake/secret/key/for/the/local/fake/only",
};

export function account(overrides: Record<string, unknown>): CloudAccountSpec {
  return CloudAccountSpecSchema.parse({
    id: "aws-main",
    provider: "aws",
    account_id: "123456789012",
    regions: ["us-east-1"],
    credentials: { kind: "none" },
    ...overrides,
  });
}

export function target(nodeId: string, overrides: Partial<PriceTarget> = {}): PriceTarget {
  return {
    nodeId,
    region: "us-east-1",
    zone: undefined,
    instanceType: "p5.48xlarge",
    gpuType: undefined,
    gpusPerInstance: 8,
    ...overrides,
  };
}
