import { defineConfig } from "vitest/config";

// End-to-end tests start a nats-server and four service processes each; on a 2-core
// machine they run one file at a time.
export default defineConfig({
  test: {
    include: ["e2e/**/*.test.ts", "lint/**/*.test.ts", "bench/**/*.test.ts"],
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
