import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { repoRoot, SERVICE_NODE_FLAGS, serviceRuntimeEnv, warmCompileCache } from "../src/index.ts";

const root = repoRoot();
const scratch = mkdtempSync(join(tmpdir(), "zml-compile-cache-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Node's built-in TypeScript stripper, as it appears in `process.moduleLoadList` once loaded. */
const STRIPPER = "internal/deps/amaro";

/**
 * Starts `service` as the launcher does, with an invalid LOG_LEVEL so it stops at its config,
 * and answers whether the process loaded the TypeScript stripper.
 */
function loadsStripper(service: string, cacheDir: string): Promise<boolean> {
  const report = `process.on("exit", () => process.stdout.write(JSON.stringify(process.moduleLoadList)))`;
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [
        ...SERVICE_NODE_FLAGS,
        "--import",
        `data:text/javascript,${encodeURIComponent(report)}`,
        join(root, `services/${service}/src/main.ts`),
      ],
      {
        env: { PATH: process.env.PATH ?? "", ...serviceRuntimeEnv(cacheDir), LOG_LEVEL: "nope" },
      },
      (error, stdout) => {
        if (error?.code !== 78) {
          reject(
            new Error(`expected the config error exit (78), got ${error?.message ?? "exit 0"}`),
          );
          return;
        }
        const modules = JSON.parse(stdout) as string[];
        resolve(modules.some((m) => m.includes(STRIPPER)));
      },
    );
  });
}

describe("warmCompileCache", { timeout: 120_000 }, () => {
  it("leaves a service nothing to type-strip: started after it, the service never loads the stripper", async () => {
    const cache = join(scratch, "cache");
    // A cold cache: the service strips its own sources, so this check can see the stripper.
    expect(await loadsStripper("attestation", join(scratch, "cold"))).toBe(true);

    await warmCompileCache(root, ["attestation", "intake"], cache);
    expect(await loadsStripper("attestation", cache)).toBe(false);
    expect(await loadsStripper("intake", cache)).toBe(false);
  });

  it("fails with the service's output when a service does not stop at its config", async () => {
    await expect(warmCompileCache(root, ["no-such-service"], join(scratch, "x"))).rejects.toThrow(
      /warming the compile cache: no-such-service ended with 1, expected the config error \(78\)/,
    );
  });
});
