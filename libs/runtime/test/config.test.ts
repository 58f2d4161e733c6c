import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  CONFIG_ERROR_EXIT_CODE,
  ConfigError,
  formatConfigError,
  parseConfig,
  readConfigFile,
} from "../src/index.ts";

const Schema = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  NATS_URL: z.string().min(1),
  TOKEN: z.string().min(16, "at least 16 characters").optional(),
});

function configErrorOf(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error("expected a ConfigError");
}

describe("parseConfig", () => {
  it("applies defaults and coercion and freezes the result", () => {
    const cfg = parseConfig(Schema, { NATS_URL: "nats://x:4222", PORT: "9000" });
    expect(cfg).toEqual({ NATS_URL: "nats://x:4222", PORT: 9000 });
    expect(Object.isFrozen(cfg)).toBe(true);
  });

  it("lists every problem at once, each with the setting and what to do", () => {
    const error = configErrorOf(() => parseConfig(Schema, { PORT: "not-a-port" }));
    expect(error.problems.map((p) => p.setting).sort()).toEqual(["NATS_URL", "PORT"]);
    const byName = new Map(error.problems.map((p) => [p.setting, p]));
    expect(byName.get("NATS_URL")!.fix).toBe("set NATS_URL");
    expect(byName.get("PORT")!.fix).toBe("correct PORT, or unset it to use the default");
  });

  it("uses the schema's own fix where one is given", () => {
    const error = configErrorOf(() =>
      parseConfig(Schema, { NATS_URL: "n", TOKEN: "short" }, { TOKEN: "use a longer token" }),
    );
    expect(error.problems).toEqual([
      { setting: "TOKEN", problem: "at least 16 characters", fix: "use a longer token" },
    ]);
  });
});

describe("formatConfigError", () => {
  it("names the service, each setting, the problem and the fix, without a stack", () => {
    const error = configErrorOf(() =>
      parseConfig(Schema, { NATS_URL: "n", TOKEN: "short" }, { TOKEN: "use a longer token" }),
    );
    const text = formatConfigError("zml-test", error);
    expect(text).toBe(
      "zml-test: cannot start, the configuration is invalid:\n" +
        "  TOKEN: at least 16 characters\n" +
        "    → use a longer token\n",
    );
  });
});

describe("readConfigFile", () => {
  it("returns the file's bytes", () => {
    const dir = mkdtempSync(join(tmpdir(), "zml-config-"));
    writeFileSync(join(dir, "a.pem"), "PEM");
    expect(readConfigFile("CERT", join(dir, "a.pem"), "PEM file").toString()).toBe("PEM");
  });

  it("turns a missing file into a problem on the setting that names it", () => {
    const error = configErrorOf(() => readConfigFile("CERT", "/nonexistent/a.pem", "PEM file"));
    expect(error.problems).toEqual([
      {
        setting: "CERT",
        problem: "cannot read /nonexistent/a.pem (ENOENT)",
        fix: "point CERT at a readable PEM file, or unset it",
      },
    ]);
  });
});

describe("reportStartupErrors", () => {
  // A real child process: the reporter's whole job is what a person sees and the exit status.
  const entry = new URL("../src/index.ts", import.meta.url).pathname;
  const run = (body: string) =>
    spawnSync(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `import * as r from ${JSON.stringify(entry)};\nr.reportStartupErrors("zml-test");\n${body}`,
      ],
      { encoding: "utf8" },
    );

  it("prints a config error thrown at top-level await for a person and exits 78", () => {
    const result = run(
      `await Promise.resolve();\nthrow new r.ConfigError([{ setting: "X", problem: "bad", fix: "set X" }]);`,
    );
    expect(result.status).toBe(CONFIG_ERROR_EXIT_CODE);
    expect(result.stderr).toBe(
      "zml-test: cannot start, the configuration is invalid:\n  X: bad\n    → set X\n",
    );
  });

  it("leaves other errors as crashes with their stack and exit 1", () => {
    const result = run(`throw new Error("boom");`);
    expect(result.status).toBe(1);
    expect(result.stderr).toContain("zml-test: Error: boom");
    expect(result.stderr).toContain("    at ");
  });
});
