import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ConfigError, parseConfig } from "../src/index.ts";

const Schema = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  NATS_URL: z.string().min(1),
});

describe("parseConfig", () => {
  it("applies defaults and coercion and freezes the result", () => {
    const cfg = parseConfig(Schema, { NATS_URL: "nats://x:4222", PORT: "9000" });
    expect(cfg).toEqual({ NATS_URL: "nats://x:4222", PORT: 9000 });
    expect(Object.isFrozen(cfg)).toBe(true);
  });

  it("lists every problem at once", () => {
    let error: unknown;
    try {
      parseConfig(Schema, { PORT: "not-a-port" });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const problems = (error as ConfigError).problems;
    expect(problems).toHaveLength(2);
    expect(problems.join("\n")).toContain("PORT");
    expect(problems.join("\n")).toContain("NATS_URL");
  });
});
