// Summarises V8 CPU profiles (from `node test/bench/run.ts --profile intake,dispatcher`):
// `node test/bench/profile-summary.ts <file.cpuprofile> [--top 25] [--from-ms 0]` prints the
// functions with the most self time, and self time per package. `--from-ms` skips the first
// part of the profile (the service's start-up: module loading, schema construction).
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
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
  const pct = (us: number) => `${((100 * us) / total).toFixed(1).padStart(5)}%`;
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
