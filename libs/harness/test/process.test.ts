import { afterEach, describe, expect, it, vi } from "vitest";
import {
  findFreePort,
  ProcessExitedError,
  ProcessTimeoutError,
  startProcess,
} from "../src/index.ts";
import type { ManagedProcess, StartProcessOptions } from "../src/index.ts";

const running: ManagedProcess[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  await Promise.all(running.splice(0).map((p) => p.kill()));
});

async function node(
  script: string,
  options: Partial<StartProcessOptions> = {},
): Promise<ManagedProcess> {
  const proc = await startProcess({
    name: "script",
    command: process.execPath,
    args: ["-e", script],
    readyTimeoutMs: 10_000,
    ...options,
  });
  running.push(proc);
  return proc;
}

// Keeps a child alive until it is signalled.
const STAY = "setInterval(() => {}, 1000);";

// Spawning node can be slow on a busy machine; these limits only bound a hang.
describe("startProcess", { timeout: 30_000 }, () => {
  it("is ready when the ready line appears, and captures stdout and stderr", async () => {
    const proc = await node(
      `console.error("warming up"); setTimeout(() => console.log("listening on 4100"), 50);` +
        `setTimeout(() => console.log("late line " + 7), 150); ${STAY}`,
      { readyLine: /listening on (\d+)/ },
    );
    expect(proc.pid).toBeGreaterThan(0);
    expect(proc.output()).toContain("warming up");
    expect(proc.output()).toContain("listening on 4100");

    const late = await proc.waitForOutput(/late line (\d+)/g);
    expect(late[1]).toBe("7");
    const earlier = await proc.waitForOutput(/listening on (\d+)/);
    expect(earlier[1]).toBe("4100");
  });

  it("is ready when the ready URL answers 200", async () => {
    const port = await findFreePort();
    const proc = await node(
      `let up = false; setTimeout(() => { up = true; }, 100);` +
        `require("node:http").createServer((req, res) => { res.statusCode = up ? 200 : 503; res.end("x"); })` +
        `.listen(Number(process.env.PORT), "127.0.0.1");`,
      { env: { PORT: String(port) }, readyUrl: `http://127.0.0.1:${port}/healthz` },
    );
    const res = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(res.status).toBe(200);
    await res.text();
    await proc.stop();
  });

  it("stops with SIGTERM and reports the exit code", async () => {
    const proc = await node(
      `process.on("SIGTERM", () => { console.log("draining"); process.exit(7); });` +
        `console.log("ready"); ${STAY}`,
      { readyLine: /^ready$/ },
    );
    expect(await proc.stop()).toBe(7);
    expect(await proc.exited).toBe(7);
    expect(proc.output()).toContain("draining");
    expect(await proc.stop()).toBe(7);
  });

  it("escalates to SIGKILL when the grace period runs out", async () => {
    const proc = await node(
      `process.on("SIGTERM", () => console.log("ignoring")); console.log("ready"); ${STAY}`,
      {
        readyLine: /^ready$/,
      },
    );
    expect(await proc.stop("SIGTERM", 200)).toBeNull();
    expect(proc.output()).toContain("ignoring");
  });

  it("rejects with the output tail when the process exits before it is ready", async () => {
    const error = await node(
      `console.log("loading config"); console.error("invalid config: NATS_URL missing"); process.exit(3);`,
      { readyLine: /listening/ },
    ).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(ProcessExitedError);
    const exited = error as ProcessExitedError;
    expect(exited.code).toBe("process_exited");
    expect(exited.exitCode).toBe(3);
    expect(exited.message).toContain("invalid config: NATS_URL missing");
    expect(exited.output).toContain("loading config");
  });

  it("rejects when the ready URL never answers before the process exits", async () => {
    const port = await findFreePort();
    const error = await node(
      `setTimeout(() => { console.error("crashed"); process.exit(1); }, 100);`,
      {
        readyUrl: `http://127.0.0.1:${port}/healthz`,
      },
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProcessExitedError);
    expect((error as ProcessExitedError).message).toContain("crashed");
  });

  it("times out, kills the process and reports its output", async () => {
    let pid = 0;
    const error = await node(`console.log("pid " + process.pid); ${STAY}`, {
      readyLine: /never printed/,
      readyTimeoutMs: 2000,
      onOutput: (line) => {
        const m = /^pid (\d+)$/.exec(line);
        if (m) pid = Number(m[1]);
      },
    }).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(ProcessTimeoutError);
    expect((error as ProcessTimeoutError).code).toBe("process_timeout");
    expect((error as ProcessTimeoutError).message).toContain(`pid ${pid}`);
    expect(pid).toBeGreaterThan(0);
    expect(() => process.kill(pid, 0)).toThrow(/ESRCH/);
  });

  it("rejects waitForOutput when the process exits without the line", async () => {
    const proc = await node(
      `console.log("started"); setTimeout(() => { process.stdout.write("no newline"); process.exit(0); }, 100);`,
      { readyLine: /started/ },
    );
    await expect(proc.waitForOutput(/never/)).rejects.toBeInstanceOf(ProcessExitedError);
    expect(await proc.exited).toBe(0);
    // A last line without a newline is still captured once the stream ends.
    expect(proc.output().split("\n")).toEqual(["started", "no newline"]);
  });

  it("rejects with Node's error when the command does not exist", async () => {
    await expect(
      startProcess({ name: "missing", command: "/nonexistent/zml-binary", args: [] }),
    ).rejects.toMatchObject({ code: "ENOENT" });
  });

  it("echoes output with a name prefix when asked", async () => {
    const writes: string[] = [];
    vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
      writes.push(String(chunk));
      return true;
    });
    const proc = await node(`console.log("hello"); ${STAY}`, {
      name: "dispatcher",
      readyLine: /hello/,
      echo: true,
    });
    expect(writes).toContain("[dispatcher] hello\n");
    await proc.stop();
  });
});
