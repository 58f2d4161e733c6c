import { spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { LoadPlan, LoadResult } from "./plan.ts";

/** The load generator process, driven one plan at a time. */
export interface LoadGenerator {
  readonly pid: number;
  run(plan: Omit<LoadPlan, "id">): Promise<LoadResult>;
  close(): Promise<void>;
}

/** Spawns `load.ts` with this Node binary; with `cpuProfileDir`, under `--cpu-prof`. */
export async function startLoadGenerator(
  options: { cpuProfileDir?: string } = {},
): Promise<LoadGenerator> {
  const profile = options.cpuProfileDir
    ? ["--cpu-prof", `--cpu-prof-dir=${options.cpuProfileDir}`]
    : [];
  const child = spawn(process.execPath, [...profile, join(import.meta.dirname, "load.ts")], {
    stdio: ["pipe", "pipe", "pipe"],
  });
  await once(child, "spawn");
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (text: string) => {
    stderr = (stderr + text).slice(-4000);
  });
  const waiting = new Map<number, { resolve(r: LoadResult): void; reject(e: Error): void }>();
  let exited = false;
  child.once("exit", (code, signal) => {
    exited = true;
    const error = new Error(
      `load generator exited (${signal ?? String(code)}); stderr:\n${stderr}`,
    );
    for (const w of waiting.values()) w.reject(error);
    waiting.clear();
  });
  createInterface({ input: child.stdout }).on("line", (line) => {
    // JSON turns the NaN of an empty percentile into null; turn it back, or null - null = 0.
    const result = JSON.parse(line, (key, value: unknown) =>
      value === null && (key === "p50" || key === "p99" || key === "max") ? Number.NaN : value,
    ) as LoadResult;
    waiting.get(result.id)?.resolve(result);
    waiting.delete(result.id);
  });

  let nextId = 0;
  return {
    pid: child.pid ?? -1,
    run(plan) {
      if (exited) return Promise.reject(new Error(`load generator is gone; stderr:\n${stderr}`));
      const id = nextId++;
      return new Promise<LoadResult>((resolve, reject) => {
        waiting.set(id, { resolve, reject });
        child.stdin.write(`${JSON.stringify({ ...plan, id })}\n`);
      });
    },
    async close() {
      if (exited) return;
      const gone = once(child, "exit");
      child.stdin.end();
      const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
      await gone;
      clearTimeout(timer);
    },
  };
}
