import { ensureBusResources, openKv } from "@zml/bus";
import type { Bus } from "@zml/bus";
import {
  endpointProblem,
  KV_BUCKETS,
  nodeAddressPolicyFromEnv,
  NodeStateSchema,
} from "@zml/contracts";
import type { FleetDocument, NodeAddressPolicy } from "@zml/contracts";
import { FleetDocumentError, applyFleet, formatProblem, parseFleetDocument } from "@zml/fleet";
import type { FleetChange } from "@zml/fleet";
import { withBus } from "../connect.ts";
import { readBucket } from "../kv-read.ts";
import { CliError, parseCommandArgs, UsageError } from "../io.ts";
import type { CliIo } from "../io.ts";

export const APPLY_USAGE = `usage: zml apply -f <fleet.yaml> [--dry-run] [--prune] [--nats <url>]

  -f, --file <path>  fleet document (YAML or JSON, apiVersion zml/v1)
  --dry-run          show what would change, change nothing
  --prune            also delete nodes, models, policies and accounts the file does not list
  --nats <url>       NATS server (default: $NATS_URL, else nats://127.0.0.1:4222)

Prints one line per change (+ created, ~ updated with the fields that differ, - deleted).
Applying the same file again changes nothing. Services pick changes up live.
Warns (on stderr) about a node registered for a model its engine does not list as served,
from what the health aggregator last read of the engine.
`;

/** `zml apply`: validates a fleet file, shows its changes, applies them to NATS KV. */
export async function runApply(args: string[], io: CliIo): Promise<number> {
  const { values } = parse(args);
  if (values.help) {
    io.stdout(APPLY_USAGE);
    return 0;
  }
  if (!values.file) throw new UsageError("missing -f <fleet.yaml>");
  const doc = loadDocument(values.file, io);
  checkNodeEndpoints(values.file, doc, io.env);
  return withBus(values.nats, io, async (bus) => {
    const options = { prune: values.prune === true };
    // As the admin identity, the first apply also sets the bus up: every bucket and stream
    // exists before a service binds to it (services may not create them).
    if (!values["dry-run"]) await ensureBusResources(bus);
    const plan = await applyFleet(bus, doc, { ...options, dryRun: true });
    const fields = await changedFields(bus, doc, plan);
    const changes = values["dry-run"] ? plan : await applyFleet(bus, doc, options);
    for (const c of changes) io.stdout(`${describe(c, fields)}\n`);
    for (const warning of await servedModelWarnings(bus, doc)) io.stderr(`warning: ${warning}\n`);
    const verb = values["dry-run"] ? "would change" : "changed";
    io.stdout(
      changes.length === 0
        ? `no changes (${values.file} is already applied)\n`
        : `${changes.length} ${changes.length === 1 ? "entry" : "entries"} ${verb}\n`,
    );
    return 0;
  });
}

/**
 * Nodes of the document registered for models their engine does not list (its `/v1/models`
 * or TGI's `/info`, as the health aggregator last read them): vLLM refuses such a model, so
 * routing will not send it there; TGI and llama.cpp answer any name with their one model,
 * which is then not the model the client asked for. Nodes not yet probed are not judged.
 */
async function servedModelWarnings(bus: Bus, doc: FleetDocument): Promise<string[]> {
  const states = new Map(
    (await readBucket(bus, KV_BUCKETS.nodeState, NodeStateSchema)).map((s) => [s.key, s.value]),
  );
  const warnings: string[] = [];
  for (const node of doc.nodes) {
    const served = states.get(node.id)?.served_models ?? null;
    if (served === null) continue;
    const missing = node.models.filter((m) => !served.includes(m));
    if (missing.length === 0) continue;
    const consequence =
      node.framework === "vllm"
        ? "vLLM refuses a model it does not serve: these will not be routed to it"
        : `${node.framework} answers any model name with the model it serves, so clients asking for these would get that one`;
    warnings.push(
      `node ${node.id} is registered for ${missing.join(", ")}, which its engine does not serve (it serves ${served.join(", ") || "nothing"}): ${consequence}`,
    );
  }
  return warnings;
}

function parse(args: string[]) {
  return parseCommandArgs({
    args,
    strict: true,
    options: {
      file: { type: "string", short: "f" },
      "dry-run": { type: "boolean" },
      prune: { type: "boolean" },
      nats: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
}

function loadDocument(path: string, io: CliIo): FleetDocument {
  let text: string;
  try {
    text = Buffer.from(io.readFile(path)).toString("utf8");
  } catch (err) {
    throw new CliError(`cannot read ${path}: ${(err as Error).message}`);
  }
  try {
    return parseFleetDocument(text);
  } catch (err) {
    if (err instanceof FleetDocumentError) {
      throw new CliError(
        `${path} is not a valid fleet document:\n${err.problems.map((p) => `  ${formatProblem(p, path)}`).join("\n")}`,
      );
    }
    throw err;
  }
}

/**
 * The same address rules as the admin API's, with the same settings: loopback only with
 * `ZML_NODE_ALLOW_LOOPBACK=true`, link-local, metadata and unspecified addresses only where
 * `ZML_NODE_ALLOW_CIDRS` allows them. Each problem names the node's endpoint and its code.
 */
function checkNodeEndpoints(
  path: string,
  doc: FleetDocument,
  env: Record<string, string | undefined>,
): void {
  let policy: NodeAddressPolicy;
  try {
    policy = nodeAddressPolicyFromEnv(env);
  } catch (err) {
    throw new CliError((err as Error).message);
  }
  const problems = doc.nodes.flatMap((n, i) => {
    const problem = endpointProblem(n.endpoint, policy);
    return problem === undefined
      ? []
      : [`  nodes.${i}.endpoint: ${problem.message} (${problem.code})`];
  });
  if (problems.length > 0) {
    throw new CliError(`${path} is not a valid fleet document:\n${problems.join("\n")}`);
  }
}

const KIND_OF_BUCKET = new Map<string, string>(
  Object.entries(KV_BUCKETS).map(([kind, bucket]) => [bucket, kind]),
);

function describe(c: FleetChange, fields: Map<string, string[]>): string {
  const name = `${KIND_OF_BUCKET.get(c.bucket) ?? c.bucket}/${c.key}`;
  if (c.action === "create") return `+ ${name} created`;
  if (c.action === "delete") return `- ${name} deleted`;
  const changed = fields.get(`${c.bucket}/${c.key}`);
  return `~ ${name} updated${changed?.length ? ` (${changed.join(", ")})` : ""}`;
}

/** For each planned update, the top-level fields whose values differ. */
async function changedFields(
  bus: Bus,
  doc: FleetDocument,
  plan: FleetChange[],
): Promise<Map<string, string[]>> {
  const desired = new Map<string, Record<string, unknown>>();
  const add = (bucket: string, key: string, value: object) =>
    desired.set(`${bucket}/${key}`, value as Record<string, unknown>);
  for (const n of doc.nodes) add(KV_BUCKETS.nodes, n.id, n);
  for (const m of doc.models) add(KV_BUCKETS.models, m.id, m);
  for (const p of doc.policies) add(KV_BUCKETS.policies, p.name, p);
  for (const a of doc.accounts) add(KV_BUCKETS.accounts, a.id, a);
  const out = new Map<string, string[]>();
  for (const c of plan.filter((x) => x.action === "update")) {
    const entry = await (await openKv(bus, c.bucket)).get(c.key);
    const current: Record<string, unknown> =
      entry?.operation === "PUT" ? entry.json<Record<string, unknown>>() : {};
    const wanted = desired.get(`${c.bucket}/${c.key}`) ?? {};
    const keys = new Set([...Object.keys(current), ...Object.keys(wanted)]);
    out.set(
      `${c.bucket}/${c.key}`,
      [...keys].filter((k) => JSON.stringify(current[k]) !== JSON.stringify(wanted[k])),
    );
  }
  return out;
}
