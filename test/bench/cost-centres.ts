// The cost centres the bench's profiles are summarised into (`profile-summary.ts` for V8 CPU
// profiles, `on-cpu.ts` for perf samples): which part of a request's path a sampled stack
// belongs to.
/**
 * The cost centres of docs/performance.md's breakdown. A sample is charged to the first frame,
 * walking from the leaf towards the root, that names one: a native `writev` called from the
 * NATS transport is NATS, called from an HTTP response is HTTP.
 */
export const CATEGORIES: Array<[string, RegExp]> = [
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

function categoryOf(key: string): string | undefined {
  for (const [name, re] of CATEGORIES) if (re.test(key)) return name;
  return undefined;
}

/**
 * The cost centre of one sampled stack, its frames leaf first, each named `<url>:<function>`
 * (any text that holds the script's path and the function's name). Node's own frames
 * (sockets, streams, http) are charged to the library that called them when that is the
 * NATS client or undici, else to node http. Undefined when no frame names one.
 */
export function costCentreOf(frames: readonly string[]): string | undefined {
  let inNode = false;
  for (const key of frames) {
    const found = categoryOf(key);
    if (found === NODE_HTTP) inNode = true;
    else if (found !== undefined) return inNode && !SOCKET_OWNERS.has(found) ? NODE_HTTP : found;
  }
  return inNode ? NODE_HTTP : undefined;
}
