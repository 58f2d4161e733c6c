import { spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";

/**
 * A bench process driven one plan at a time over its standard streams: a plan is one JSON line
 * in (with an `id`), its result one JSON line out (with the same `id`). The load generator and
 * the routing-quality client are both run this way, so that their clients' CPU is their own.
 */
export interface PlanProcess<Plan, Result> {
  readonly pid: number;
  run(plan: Plan): Promise<Result>;
  close(): Promise<void>;
}

/**
 * Spawns `script` with this Node binary (after `nodeArgs`). `what` names it in errors;
 * `nanKeys` are the result keys whose `null` was a NaN (JSON writes NaN, e.g. the percentile of
 * no samples, as null, and null − null would be 0).
 */
export async function startPlanProcess<Plan extends object, Result extends { id: number }>(
  script: string,
  options: { what: string; nanKeys: RegExp; nodeArgs?: string[] },
): Promise<PlanProcess<Plan, Result>> {
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), script], {
    stdio: ["pipe", "pipe", "pipe"],
  });
  await once(child, "spawn");
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (text: string) => {
    stderr = (stderr + text).slice(-4000);
  });
  const waiting = new Map<number, { resolve(r: Result): void; reject(e: Error): void }>();
  let exited = false;
  child.once("exit", (code, signal) => {
    exited = true;
    const error = new Error(
      `${options.what} exited (${signal ?? String(code)}); stderr:\n${stderr}`,
    );
    for (const w of waiting.values()) w.reject(error);
    waiting.clear();
  });
  createInterface({ input: child.stdout }).on("line", (line) => {
    const result = JSON.parse(line, (key, value: unknown) =>
      value === null && options.nanKeys.test(key) ? Number.NaN : value,
    ) as Result;
    waiting.get(result.id)?.resolve(result);
    waiting.delete(result.id);
  });
  let nextId = 0;
  return {
    pid: child.pid ?? -1,
    run(plan) {
      if (exited) return Promise.reject(new Error(`${options.what} is gone; stderr:\n${stderr}`));
      const id = nextId++;
      return new Promise<Result>((resolve, reject) => {
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
