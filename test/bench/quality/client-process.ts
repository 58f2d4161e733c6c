import { spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { QualityPlan, QualityResult } from "./plan.ts";

/** The routing-quality client process (`client.ts`), driven one plan at a time. */
export interface QualityClient {
  readonly pid: number;
  run(plan: Omit<QualityPlan, "id">): Promise<QualityResult>;
  close(): Promise<void>;
}

export async function startQualityClient(): Promise<QualityClient> {
  const child = spawn(process.execPath, [join(import.meta.dirname, "client.ts")], {
    stdio: ["pipe", "pipe", "pipe"],
  });
  await once(child, "spawn");
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (text: string) => {
    stderr = (stderr + text).slice(-4000);
  });
  const waiting = new Map<number, { resolve(r: QualityResult): void; reject(e: Error): void }>();
  let exited = false;
  child.once("exit", (code, signal) => {
    exited = true;
    const error = new Error(
      `quality client exited (${signal ?? String(code)}); stderr:\n${stderr}`,
    );
    for (const w of waiting.values()) w.reject(error);
    waiting.clear();
  });
  createInterface({ input: child.stdout }).on("line", (line) => {
    // JSON turns the NaN of an empty percentile into null; turn it back.
    const result = JSON.parse(line, (key, value: unknown) =>
      value === null && /^p\d+$/.test(key) ? Number.NaN : value,
    ) as QualityResult;
    waiting.get(result.id)?.resolve(result);
    waiting.delete(result.id);
  });
  let nextId = 0;
  return {
    pid: child.pid ?? -1,
    run(plan) {
      if (exited) return Promise.reject(new Error(`quality client is gone; stderr:\n${stderr}`));
      const id = nextId++;
      return new Promise<QualityResult>((resolve, reject) => {
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
