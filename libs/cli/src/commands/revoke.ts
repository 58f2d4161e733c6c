import { openKv } from "@zml/bus";
import { KV_BUCKETS, RevocationSchema } from "@zml/contracts";
import { withBus } from "../connect.ts";
import { CliError, parseCommandArgs, UsageError } from "../io.ts";
import type { CliIo } from "../io.ts";

export const REVOKE_USAGE = `usage: zml revoke <id> --reason <text> [match …] [--nats <url>]
       zml revoke --withdraw <id> [--nats <url>]

Adds an entry to the revocation list: every cached attestation matching all the given
fields is invalidated fleet-wide at once. At least one match is required:

  --node <id>          one node
  --mrtd <hex>         a code measurement (48 bytes of hex)
  --fmspc <hex>        a platform (6 bytes of hex)
  --pck-serial <hex>   one PCK certificate
  --advisory <id>      an Intel security advisory, e.g. INTEL-SA-00837

--withdraw removes an entry (e.g. one made by mistake). List with: zml get revocations
`;

/** Flag → revocation document field. */
const MATCH_FLAGS = {
  node: "node_id",
  mrtd: "mrtd",
  fmspc: "fmspc",
  "pck-serial": "pck_serial",
  advisory: "advisory_id",
} as const;
const FLAG_OF_FIELD = new Map<string, string>(
  Object.entries(MATCH_FLAGS).map(([flag, field]) => [field, `--${flag}`]),
);

/** `zml revoke`: writes (or withdraws) a revocation-list entry in NATS KV. */
export async function runRevoke(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(args);
  if (values.help) {
    io.stdout(REVOKE_USAGE);
    return 0;
  }
  if (values.withdraw !== undefined) {
    if (positionals.length > 0) throw new UsageError("--withdraw takes the id itself");
    return withdraw(values.withdraw, values.nats, io);
  }
  if (positionals.length !== 1) throw new UsageError("expected exactly one revocation id");
  const doc: Record<string, unknown> = {
    id: positionals[0],
    reason: values.reason,
    revoked_at: io.now().getTime(),
  };
  for (const [flag, field] of Object.entries(MATCH_FLAGS)) {
    const v = values[flag as keyof typeof MATCH_FLAGS];
    if (v !== undefined) doc[field] = v;
  }
  const parsed = RevocationSchema.safeParse(doc);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = String(issue.path[0] ?? "");
    const name =
      field === "id"
        ? "<id>"
        : field === "reason"
          ? "--reason"
          : (FLAG_OF_FIELD.get(field) ?? field);
    throw new UsageError(
      field === "node_id" && issue.code === "custom"
        ? `give at least one of ${Object.keys(MATCH_FLAGS)
            .map((f) => `--${f}`)
            .join(", ")}`
        : `${name}: ${issue.message}`,
    );
  }
  return withBus(values.nats, io, async (bus) => {
    const kv = await openKv(bus, KV_BUCKETS.revocations);
    if ((await kv.get(parsed.data.id))?.operation === "PUT") {
      throw new CliError(
        `revocation ${parsed.data.id} exists; withdraw it first or pick another id`,
      );
    }
    await kv.put(parsed.data.id, JSON.stringify(parsed.data));
    io.stdout(`revoked ${parsed.data.id}\n`);
    return 0;
  });
}

async function withdraw(id: string, nats: string | undefined, io: CliIo): Promise<number> {
  return withBus(nats, io, async (bus) => {
    const kv = await openKv(bus, KV_BUCKETS.revocations);
    if ((await kv.get(id))?.operation !== "PUT") throw new CliError(`no revocation ${id}`);
    await kv.delete(id);
    io.stdout(`withdrew ${id}\n`);
    return 0;
  });
}

function parse(args: string[]) {
  return parseCommandArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: {
      reason: { type: "string" },
      node: { type: "string" },
      mrtd: { type: "string" },
      fmspc: { type: "string" },
      "pck-serial": { type: "string" },
      advisory: { type: "string" },
      withdraw: { type: "string" },
      nats: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
}
