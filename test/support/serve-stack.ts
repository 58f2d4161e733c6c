// Serves a whole gateway (./stack.ts) to a test suite written in another language, such as
// the Python SDK's pytest suite: once the gateway routes, it prints one JSON line
//   {"base_url": …, "api_key": …, "nats_url": …, "nodes": {"<id>": {"url": …, "tier": …}}}
// and keeps running until its stdin closes (the parent exited, however it exited) or it
// gets SIGTERM/SIGINT. Everything else it prints goes to stderr.
//
// The fleet: four tier-1 nodes of different families (policy `interactive` prefers H100,
// `mi300x-first` MI300X; `l40s-only` and `a100-only` reach the nodes tests break on purpose)
// and two attested tier-4 nodes (behind TD proxies) for sealed sessions. The test account may use tiers 1 and 4; a
// second key's account is rate-limited to 1 request a minute.
import { createHash } from "node:crypto";
import { ROUTING_HTTP_HEADER } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import {
  approveMeasurements,
  MRTD,
  pki,
  teeNode,
  waitForResult,
} from "../e2e/attestation-fixtures.ts";
import {
  API_KEY,
  authHeaders,
  chainPolicy,
  chatBody,
  MODEL,
  startStack,
  waitForStatus,
} from "./stack.ts";

/** A second account's key with a tight rate limit, so clients can meet a real 429. */
export const LIMITED_API_KEY = "e2e-limited-key-0123456789";
const TIER4 = ["t4-a", "t4-b"];

const stack = await startStack({
  nodes: [
    { nodeId: "h100-a", family: "H100" },
    { nodeId: "mi300x-a", family: "MI300X" },
    { nodeId: "l40s-a", family: "L40S" },
    { nodeId: "a100-a", family: "A100" },
    ...TIER4.map((id) => teeNode(id, {}, 4)),
  ],
  fleet: {
    models: [{ id: MODEL }],
    policies: [
      chainPolicy("interactive", ["H100", "MI300X"]),
      chainPolicy("mi300x-first", ["MI300X", "H100"]),
      // One node each, for tests that break a node on purpose.
      chainPolicy("l40s-only", ["L40S"]),
      chainPolicy("a100-only", ["A100"]),
    ],
  },
  allowedTiers: [1, 4],
  trustedRootPem: pki.root.pem,
  seed: (bus) => approveMeasurements(bus, [{ id: "llama-t4", mrtd: MRTD, tier: 4 }]),
});
let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  void Promise.allSettled([stack.stop()]).then(() => process.exit(0));
};
process.stdin.on("end", stop).on("close", stop).resume();
process.on("SIGTERM", stop).on("SIGINT", stop);

await stack.apply({
  ...stack.fleet,
  accounts: [
    ...stack.fleet.accounts,
    {
      id: "limited",
      api_key_sha256: [createHash("sha256").update(LIMITED_API_KEY).digest("hex")],
      allowed_tiers: [1],
      rate_limit: { requests_per_minute: 1, burst: 1 },
    },
  ],
});
await waitForStatus(stack, "Active");
for (const id of TIER4) await waitForResult(stack, id, (r) => r.ok, "attested");
// The dispatchers' view of node state trails the KV snapshot by a moment: wait until both
// tier-1 families are routable.
for (const [name, family] of [
  ["interactive", "H100"],
  ["mi300x-first", "MI300X"],
  ["l40s-only", "L40S"],
  ["a100-only", "A100"],
]) {
  await pollUntil(
    async () => {
      const res = await fetch(`${stack.intakeUrl}/v1/chat/completions`, {
        method: "POST",
        headers: authHeaders(),
        body: chatBody({ policy: name }),
      });
      await res.arrayBuffer();
      return res.headers.get(ROUTING_HTTP_HEADER)?.includes(`family="${family}"`) === true;
    },
    { timeoutMs: 15_000, message: `${family} routable` },
  );
}
// `url` is each node's serving framework (its `/_sim` control API); a tier-4 node's is behind
// its TD proxy, so it is `sealed`.
const nodes = Object.fromEntries(
  [...stack.sims].map(([id, sim]) => [
    id,
    {
      url: sim.url,
      tier: stack.fleet.nodes.find((n) => n.id === id)?.tier,
      ...(stack.tdProxies.has(id) ? { sealed: true } : {}),
    },
  ]),
);
process.stdout.write(
  `${JSON.stringify({
    base_url: stack.intakeUrl,
    api_key: API_KEY,
    limited_api_key: LIMITED_API_KEY,
    nats_url: stack.nats.url,
    model: MODEL,
    nodes,
    // The test root the tier-4 nodes' quotes chain to (never Intel's), and their measurement.
    tdx_root_pem_file: stack.trustedRootPemFile,
    tdx_mrtd: MRTD,
  })}\n`,
);
