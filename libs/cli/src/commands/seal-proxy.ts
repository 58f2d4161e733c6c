import { isIP } from "node:net";
import { CliError, parseCommandArgs, UsageError } from "../io.ts";
import type { CliIo } from "../io.ts";

export const SEAL_PROXY_USAGE = `usage: zml seal-proxy --gateway <url> --api-key <key> --model <model>
                      [--listen 127.0.0.1:<port>] [--mrtd <hex> …] [--policy <name>] [--ttl-s <s>]
                      [--trust-test-root <pem>]

A local OpenAI-compatible endpoint for a tier-4 model, end to end: it opens a session on the
gateway, verifies the node's TDX quote itself (Intel's root, the measurement, the binding of
its nonce and of the session key), then seals every request to that key and opens every
answer. Point any OpenAI client at http://<listen>/v1: the gateway carries only ciphertext.
When the session ends (its node failed, it expired) a new one is opened and verified.

  --gateway <url>          the ZML gateway (also $ZML_BASE_URL)
  --api-key <key>          your ZML API key (also $ZML_API_KEY)
  --model <model>          the tier-4 model this endpoint serves
  --listen <host:port>     loopback only: requests arrive here in clear (default 127.0.0.1:8787)
  --mrtd <hex>             an approved TD measurement (repeatable); default: the one the
                           gateway's public allowlist shows for the session's node
  --policy <name>          the routing policy the session is opened by
  --ttl-s <seconds>        each session's lifetime (default 3600)
  --trust-test-root <pem>  trust this root instead of Intel's: ONLY for the dev stack's
                           simulated TEE nodes, whose quotes chain to a test root
`;

/** `zml seal-proxy`: serves until SIGINT or SIGTERM, then ends its session. */
export async function runSealProxy(args: string[], io: CliIo): Promise<number> {
  const { values } = parseCommandArgs({
    args,
    strict: true,
    options: {
      gateway: { type: "string" },
      "api-key": { type: "string" },
      model: { type: "string" },
      listen: { type: "string", default: "127.0.0.1:8787" },
      mrtd: { type: "string", multiple: true },
      policy: { type: "string" },
      "ttl-s": { type: "string" },
      "trust-test-root": { type: "string" },
      help: { type: "boolean" },
    },
  });
  if (values.help) {
    io.stdout(SEAL_PROXY_USAGE);
    return 0;
  }
  const gateway = values.gateway ?? io.env["ZML_BASE_URL"];
  const apiKey = values["api-key"] ?? io.env["ZML_API_KEY"];
  if (!gateway) throw new UsageError("--gateway is required (or $ZML_BASE_URL)");
  if (!apiKey) throw new UsageError("--api-key is required (or $ZML_API_KEY)");
  if (!values.model) throw new UsageError("--model is required");
  const listen = /^(.+):(\d{1,5})$/.exec(values.listen);
  if (!listen) throw new UsageError("--listen: expected host:port, e.g. 127.0.0.1:8787");
  const host = listen[1]!.replace(/^\[|\]$/g, "");
  if (!isLoopback(host)) {
    throw new UsageError(
      `--listen ${values.listen}: requests arrive here in clear, so it listens on loopback only`,
    );
  }
  const ttlS = values["ttl-s"] === undefined ? undefined : Number(values["ttl-s"]);
  if (ttlS !== undefined && !(Number.isInteger(ttlS) && ttlS > 0)) {
    throw new UsageError("--ttl-s: a positive number of seconds");
  }
  for (const m of values.mrtd ?? []) {
    if (!/^[0-9a-fA-F]{96}$/.test(m)) throw new UsageError("--mrtd: 48 bytes of hex");
  }
  let trustedRootPem: string | undefined;
  if (values["trust-test-root"] !== undefined) {
    try {
      trustedRootPem = Buffer.from(io.readFile(values["trust-test-root"])).toString("utf8");
    } catch (error) {
      throw new CliError(`cannot read ${values["trust-test-root"]}: ${(error as Error).message}`);
    }
    io.stderr(
      "zml seal-proxy: trusting a TEST root instead of Intel's (--trust-test-root): " +
        "for the dev stack's simulated nodes only\n",
    );
  }
  // Loaded here: the other commands never need the SDK.
  const { createClient } = await import("@zml/client");
  const { startSealProxy } = await import("../seal-proxy/server.ts");
  const client = createClient({ baseUrl: gateway, apiKey, timeoutMs: 120_000 });
  const model = values.model;
  const openSession = () =>
    client.sessions.create({
      model,
      ...(values.policy === undefined ? {} : { policy: values.policy }),
      ...(ttlS === undefined ? {} : { ttl_s: ttlS }),
      ...(values.mrtd === undefined
        ? {}
        : { approvedMeasurements: values.mrtd.map((mrtd) => ({ mrtd })) }),
      ...(trustedRootPem === undefined ? {} : { trustedRootPem }),
    });
  let proxy;
  try {
    proxy = await startSealProxy({
      model,
      openSession,
      host,
      port: Number(listen[2]),
      log: (line) => io.stderr(`zml seal-proxy: ${line}\n`),
    });
  } catch (error) {
    throw new CliError(`could not start: ${(error as Error).message}`);
  }
  io.stdout(`zml seal-proxy: serving ${model} end to end at ${proxy.url}\n`);
  await new Promise<void>((resolve) => {
    process.once("SIGINT", resolve);
    process.once("SIGTERM", resolve);
  });
  await proxy.close();
  return 0;
}

function isLoopback(host: string): boolean {
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  return host === "::1";
}
