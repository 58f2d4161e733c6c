// A logger without a destination writes to stdout in batches (logger.ts, `bufferedStdout`).
// Each case runs a real process that logs and then ends in a given way, and reads what
// reached its stdout pipe.
import { spawn } from "node:child_process";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

const LOGGER = pathToFileURL(fileURLToPath(new URL("../src/logger.ts", import.meta.url))).href;

/** Runs `body` after `const log = createLogger(...)` in a fresh process; resolves its stdout lines. */
function runLogging(body: string): Promise<Array<Record<string, unknown>>> {
  const script = `import { createLogger } from ${JSON.stringify(LOGGER)};
const log = createLogger({ service: "test", level: "info" });
${body}`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
    child.on("error", reject);
    child.on("close", () =>
      resolve(
        out
          .split("\n")
          .filter((line) => line.length > 0)
          .map((line) => JSON.parse(line) as Record<string, unknown>),
      ),
    );
  });
}

describe("stdout batching", () => {
  it("writes a warning at once, with the info lines before it, even if the process is then killed", async () => {
    const lines = await runLogging(`
log.info({ n: 1 }, "first");
log.info({ n: 2 }, "second");
log.warn("trouble");
process.kill(process.pid, "SIGKILL");`);
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      ["info", "first"],
      ["info", "second"],
      ["warn", "trouble"],
    ]);
  });

  it("writes buffered lines when the process exits, process.exit included", async () => {
    const lines = await runLogging(`
for (let i = 0; i < 3; i++) log.info({ i }, "line");
process.exit(3);`);
    expect(lines.map((l) => l.i)).toEqual([0, 1, 2]);
  });

  it("writes an info line while the process keeps running, without a warning or an exit", async () => {
    const child = spawn(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `import { createLogger } from ${JSON.stringify(LOGGER)};
createLogger({ service: "test", level: "info" }).info("quiet traffic");
setInterval(() => {}, 1000);`,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    try {
      // Only the periodic flush can write it: the process neither warns nor exits until killed.
      const line = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("the line never arrived")), 5_000);
        child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
          clearTimeout(timer);
          resolve(chunk);
        });
      });
      expect(JSON.parse(line)).toMatchObject({ level: "info", msg: "quiet traffic" });
      expect(child.exitCode).toBeNull();
    } finally {
      child.kill("SIGKILL");
    }
  }, 15_000);

  it("writes lines in batches, not one system call per line", async () => {
    // 2 000 short lines, then SIGKILL without a warning: what a batched writer has not yet
    // written is lost, so fewer lines arrive than were logged, but every one that does is
    // whole and in order.
    const lines = await runLogging(`
for (let i = 0; i < 2000; i++) log.info({ i }, "line");
process.kill(process.pid, "SIGKILL");`);
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.length).toBeLessThan(2000);
    expect(lines.map((l) => l.i)).toEqual(lines.map((_, i) => i));
  });
});
