import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { isAbsolute, join } from "node:path";
import { describe, expect, it } from "vitest";
import { findFreePort, repoRoot } from "../src/index.ts";

describe("findFreePort", () => {
  it("returns a port below the ephemeral range that can be bound, never the same one twice", async () => {
    const ports = await Promise.all(Array.from({ length: 50 }, () => findFreePort()));
    expect(new Set(ports).size).toBe(ports.length);
    // Outgoing connections and listen(0) take ephemeral ports (32768 and up on Linux).
    for (const p of ports) {
      expect(p).toBeGreaterThanOrEqual(20_000);
      expect(p).toBeLessThan(32_768);
    }
    const port = ports[0]!;
    await new Promise<void>((resolve, reject) => {
      const server = createServer();
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => server.close(() => resolve()));
    });
  });
});

describe("repoRoot", () => {
  it("finds the monorepo root from any working directory", () => {
    const root = repoRoot();
    expect(isAbsolute(root)).toBe(true);
    const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
      name: string;
    };
    expect(manifest.name).toBe("zml");
    expect(existsSync(join(root, "libs", "harness", "package.json"))).toBe(true);
  });
});
