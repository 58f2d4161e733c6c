// Summarises V8 CPU profiles (from `node test/bench/run.ts --profile intake,dispatcher`):
// `node test/bench/profile-summary.ts <file.cpuprofile> [--top 25] [--from-ms 0]` prints the
// functions with the most self time, and self time per package. `--from-ms` skips the first
// part of the profile (the service's start-up: module loading, schema construction).
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

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

/**
 * The cost centres of docs/performance.md's breakdown. A sample is charged to the first frame,
 * walking from the leaf towards the root, that names one: a native `writev` called from the
 * NATS transport is NATS, called from an HTTP response is HTTP.
 */
const CATEGORIES: Array<[string, RegExp]> = [
  [
    "tracing",
    /node_modules\/@opentelemetry\/|\/(intake|dispatcher)\/src\/tracing\.ts|\/bus\/src\/trace-context\.ts/,
  ],
  [
    "metrics",
    /node_modules\/(prom-client|tdigest|bintrees)\/|\/(intake|dispatcher)\/src\/metrics\.ts/,
  ],
  [
    "logging",
    /node_modules\/(pino|@pinojs|pino-std-serializers|sonic-boom|thread-stream|fast-redact|quick-format-unescaped|on-exit-leak-free|safe-stable-stringify)\/|\/telemetry\/src\/logger\.ts/,
  ],
  [
    "NATS header encoding",
    /node_modules\/@nats-io\/nats-core\/lib\/headers\.js|\/bus\/src\/route-reply\.ts:(decodeFrame|frame|described)$|\/dispatcher\/src\/route-headers\.ts|\/intake\/src\/route-plan\.ts/,
  ],
  ["NATS publish/deliver", /node_modules\/@nats-io\/|\/libs\/bus\//],
  ["undici (node call)", /node_modules\/undici\//],
  [
    "JSON parse and validation",
    /node_modules\/zod\/|\/intake\/src\/(validation|json-guard|route-fields)\.ts|\/contracts\/src\//,
  ],
  ["auth", /\/intake\/src\/(auth|auth-throttle|admit|key-store)\.ts|node:internal\/crypto\//],
  ["rate limit", /\/intake\/src\/rate-limit\.ts|\/libs\/(ratelimit|rate-limit)\//],
  ["routing decision", /\/libs\/routing\//],
  [
    "framework (fastify)",
    /node_modules\/(fastify|@fastify|find-my-way|avvio|light-my-request|fast-json-stringify|abstract-logging|process-warning|toad-cache|rfdc|fast-querystring|secure-json-parse)\//,
  ],
  [
    "node http (server/client sockets)",
    /node:_http|node:internal\/http|node:http|node:net|node:internal\/stream_base_commons|node:internal\/streams\//,
  ],
  ["service code", /\/(services|libs)\//],
];

const NODE_HTTP = "node http (server/client sockets)";
const SOCKET_OWNERS = new Set([
  "NATS publish/deliver",
  "NATS header encoding",
  "undici (node call)",
]);

function categoryOf(frame: ProfileNode["callFrame"]): string | undefined {
  const key = `${frame.url}:${frame.functionName}`;
  for (const [name, re] of CATEGORIES) if (re.test(key)) return name;
  return undefined;
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
    // Node's own frames (sockets, streams, http) are charged to the library that called
    // them when that is the NATS client or undici, else to node http.
    let inNode = false;
    for (let at: number | undefined = id; category === undefined && at !== undefined;) {
      const found = categoryOf(byId.get(at)!.callFrame);
      if (found === NODE_HTTP) inNode = true;
      else if (found !== undefined)
        category = inNode && !SOCKET_OWNERS.has(found) ? NODE_HTTP : found;
      at = parent.get(at);
    }
    if (category === undefined && inNode) category = NODE_HTTP;
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
