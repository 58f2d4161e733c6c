// Summarises V8 CPU profiles (from `node test/bench/run.ts --profile intake,dispatcher`):
// `node test/bench/profile-summary.ts <file.cpuprofile> [--top 25] [--from-ms 0]` prints the
// functions with the most self time, and self time per package. `--from-ms` skips the first
// part of the profile (the service's start-up: module loading, schema construction).
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { costCentreOf } from "./cost-centres.ts";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

function packageOf(url: string): string {
  const modules = url.lastIndexOf("node_modules/");
  if (modules !== -1) {
    const parts = url.slice(modules + "node_modules/".length).split("/");
    return parts[0]!.startsWith("@") ? `${parts[0]}/${parts[1]}` : parts[0]!;
  }
  const workspace = /\/(services|libs)\/([^/]+)\//.exec(url);
  if (workspace) return `${workspace[1]}/${workspace[2]}`;
  if (url.startsWith("node:")) return "node (built-in)";
  return url === "" ? "(native / V8)" : url;
}

/** Busy time per cost centre (idle excluded; GC and native frames with no JS caller apart). */
function categorise(profile: Profile, sampled: Map<number, number>): Map<string, number> {
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const out = new Map<string, number>();
  for (const [id, us] of sampled) {
    const leaf = byId.get(id)!;
    const name = leaf.callFrame.functionName;
    let category: string | undefined;
    if (name === "(idle)") continue;
    if (name === "(garbage collector)") category = "GC";
    else if (name === "(program)") category = "V8 / runtime (no JS frame)";
    if (category === undefined) {
      const keys: string[] = [];
      for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
        const frame = byId.get(at)!.callFrame;
        keys.push(`${frame.url}:${frame.functionName}`);
      }
      category = costCentreOf(keys);
    }
    category ??= "other (event loop, timers, microtasks)";
    out.set(category, (out.get(category) ?? 0) + us);
  }
  return out;
}

function summarise(path: string, top: number, fromMs: number): string {
  const profile = JSON.parse(readFileSync(path, "utf8")) as Profile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  let total = 0;
  let elapsedUs = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    elapsedUs += dt;
    if (elapsedUs < fromMs * 1000) return;
    selfUs.set(id, (selfUs.get(id) ?? 0) + dt);
    total += dt;
  });
  const byFunction = new Map<string, number>();
  const byPackage = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const frame = byId.get(id)?.callFrame;
    if (frame === undefined) continue;
    const where =
      frame.url === ""
        ? ""
        : ` ${frame.url.replace(/^file:\/\/.*?\/(node_modules|services|libs)\//, "$1/")}:${frame.lineNumber + 1}`;
    const key = `${frame.functionName || "(anonymous)"}${where}`;
    byFunction.set(key, (byFunction.get(key) ?? 0) + us);
    const pkg = packageOf(frame.url);
    byPackage.set(pkg, (byPackage.get(pkg) ?? 0) + us);
  }
  const idleUs = [...selfUs].reduce(
    (sum, [id, us]) => (byId.get(id)?.callFrame.functionName === "(idle)" ? sum + us : sum),
    0,
  );
  const busy = total - idleUs;
  const categories = categorise(profile, selfUs);
  const pct = (us: number) => `${((100 * us) / total).toFixed(1).padStart(5)}%`;
  const busyPct = (us: number) => `${((100 * us) / busy).toFixed(1).padStart(5)}%`;
  const list = (m: Map<string, number>, n: number) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([k, us]) => `  ${pct(us)}  ${(us / 1000).toFixed(0).padStart(7)} ms  ${k}`)
      .join("\n");
  return [
    `${path}: ${(total / 1000).toFixed(0)} ms sampled (from ${fromMs} ms)`,
    "self time by function:",
    list(byFunction, top),
    "self time by package:",
    list(byPackage, 15),
    `busy time by cost centre (% of ${(busy / 1000).toFixed(0)} ms busy):`,
    [...categories]
      .sort((a, b) => b[1] - a[1])
      .map(([k, us]) => `  ${busyPct(us)}  ${(us / 1000).toFixed(0).padStart(7)} ms  ${k}`)
      .join("\n"),
  ].join("\n");
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    top: { type: "string", default: "25" },
    "from-ms": { type: "string", default: "0" },
  },
});
for (const file of positionals)
  console.log(`${summarise(file, Number(values.top), Number(values["from-ms"]))}\n`);
