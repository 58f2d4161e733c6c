import { existsSync } from "node:fs";
import { join } from "node:path";
import { AUTH_CONFIG_FILE, createLocalCa, writeCredentials } from "@zml/bus-auth";
import { SERVICE_IDENTITIES, batchIdentity } from "@zml/contracts";
import { parseCommandArgs, UsageError } from "../io.ts";
import type { CliIo } from "../io.ts";

export const BUS_CREDENTIALS_USAGE = `usage: zml bus-credentials --out <dir> [--batch-account <id> …] [--rotate <identity> …]
                           [--tls --host <name-or-ip> …]

Generates an nkey identity for every service (${SERVICE_IDENTITIES.join(", ")}) and for
each batch producer account (batch-<id>), and the nats-server authorization block that
grants each exactly what its job needs:

  <dir>/<identity>.nk   the identity's seed (secret; give each service only its own)
  <dir>/${AUTH_CONFIG_FILE}        include it from nats-server.conf: include "${AUTH_CONFIG_FILE}"

Seeds already in <dir> are kept, so running it again only adds what is missing. --rotate
gives an identity a new key (the old one stops working once nats-server reloads:
nats-server --signal reload). --tls also makes a local CA and a server certificate for the
given hosts (default localhost and 127.0.0.1) in <dir>/tls; ca.pem goes to every client as
NATS_CA_FILE.
`;

/** `zml bus-credentials`: identities and the authorization config for nats-server. */
export async function runBusCredentials(args: string[], io: CliIo): Promise<number> {
  const { values } = parseCommandArgs({
    args,
    options: {
      out: { type: "string" },
      "batch-account": { type: "string", multiple: true },
      rotate: { type: "string", multiple: true },
      tls: { type: "boolean" },
      host: { type: "string", multiple: true },
      help: { type: "boolean", short: "h" },
    },
    allowPositionals: false,
  });
  if (values.help) {
    io.stdout(BUS_CREDENTIALS_USAGE);
    return 0;
  }
  if (values.out === undefined) throw new UsageError("--out <dir> is required");
  let batch: string[];
  try {
    batch = (values["batch-account"] ?? []).map(batchIdentity);
  } catch (err) {
    throw new UsageError(`--batch-account: ${(err as Error).message}`);
  }
  if (values.host && !values.tls) throw new UsageError("--host goes with --tls");
  let result;
  try {
    result = await writeCredentials(
      values.out,
      [...SERVICE_IDENTITIES, ...batch],
      (values.rotate ?? []).filter((r) => r !== "tls"),
    );
  } catch (err) {
    if ((err as { code?: string }).code === "unknown_identity")
      throw new UsageError((err as Error).message);
    throw err;
  }
  for (const i of result.identities) {
    const what = result.generated.includes(i.identity) ? "generated" : "kept";
    io.stdout(`${what.padEnd(9)} ${i.identity.padEnd(20)} ${i.publicKey}\n`);
  }
  io.stdout(`wrote     ${result.authConfigFile}\n`);
  if (values.tls) {
    const dir = join(values.out, "tls");
    if (existsSync(join(dir, "ca.pem")) && !(values.rotate ?? []).includes("tls")) {
      io.stdout(`kept      ${dir} (--rotate tls makes a new CA)\n`);
    } else {
      const ca = await createLocalCa(dir, { hosts: values.host ?? ["localhost", "127.0.0.1"] });
      io.stdout(`wrote     ${ca.caFile}, ${ca.certFile}, ${ca.keyFile}\n`);
    }
  }
  return 0;
}
