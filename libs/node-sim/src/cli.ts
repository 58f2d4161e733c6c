// Runs one simulated node as a process: `node libs/node-sim/src/cli.ts --id h100-a
// --flavour vllm --model llama-3-8b`. Prints one JSON "ready" line on stdout once it listens
// and closes on SIGTERM or SIGINT. Bad arguments: a message on stderr and exit code 2.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { startSimNode } from "./sim-node.ts";
import { loadTestTeeMaterial } from "./tee-material.ts";
import { SIM_FLAVOURS, SIM_PROTOCOLS } from "./types.ts";
import type { SimFlavour, SimNodeOptions, SimProtocol } from "./types.ts";
import { SimInputError } from "./validate.ts";

const USAGE = `usage: node libs/node-sim/src/cli.ts --id <node-id> --model <id> [--model <id> ...]
  [--flavour vllm|tgi|llamacpp] (default vllm)   [--host 127.0.0.1] [--port 0]
  [--ttft-ms 0] [--tps 0] [--max-concurrency 8] [--completion-tokens 16] [--instance-id <id>]
  [--reply <words>] what the node answers, a word per token (default a fixed sentence)
  Engine model (vllm only; any of these turns it on; --max-concurrency is its max_num_seqs):
  [--engine] [--kv-cache-blocks 4096] [--prefill-tps 16000] [--step-base-ms 8]
  [--step-per-seq-ms 0.25]
  [--protocol http1|h2c|h2] (default http1; h2c: HTTP/2 without TLS, h2: HTTP/2 over TLS by ALPN)
  [--tls-key-file <pem> --tls-cert-file <pem>] the certificate an h2 node presents (default a
  fresh self-signed one that no client trusts by default)
  TEE mode (tiers 3-4, test certificate chain, never Intel's):
  [--tee-dir <dir> --mrtd <96 hex> [--rtmr0 <hex>] ... [--rtmr3 <hex>] [--tee-debug] [--tee-replay]]
  <dir> holds the shared test PKI (created on first use); <dir>/root.pem is the trust anchor
  to give the attestation service (ATTESTATION_TRUST_ROOT_PEM_FILE).
`;

class UsageError extends Error {}

function numberArg(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const parsed = Number(value);
  if (value.trim() === "" || !Number.isFinite(parsed)) {
    throw new UsageError(`--${name}: expected a number, got ${JSON.stringify(value)}`);
  }
  return parsed;
}

function readPem(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (error) {
    throw new UsageError(`cannot read ${file}: ${(error as Error).message}`);
  }
}

interface TeeArgs {
  dir: string;
  measurements: Partial<Record<"mrtd" | "rtmr0" | "rtmr1" | "rtmr2" | "rtmr3", string>>;
  debug: boolean;
  replay: boolean;
}

type ParsedArgs = { options: SimNodeOptions; tee: TeeArgs | undefined };

function parseOptions(argv: string[]): ParsedArgs | "help" {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        id: { type: "string" },
        flavour: { type: "string", default: "vllm" },
        model: { type: "string", multiple: true },
        host: { type: "string", default: "127.0.0.1" },
        port: { type: "string", default: "0" },
        "ttft-ms": { type: "string" },
        tps: { type: "string" },
        "max-concurrency": { type: "string" },
        "completion-tokens": { type: "string" },
        "instance-id": { type: "string" },
        reply: { type: "string" },
        engine: { type: "boolean" },
        "kv-cache-blocks": { type: "string" },
        "prefill-tps": { type: "string" },
        "step-base-ms": { type: "string" },
        "step-per-seq-ms": { type: "string" },
        protocol: { type: "string", default: "http1" },
        "tls-key-file": { type: "string" },
        "tls-cert-file": { type: "string" },
        "tee-dir": { type: "string" },
        mrtd: { type: "string" },
        rtmr0: { type: "string" },
        rtmr1: { type: "string" },
        rtmr2: { type: "string" },
        rtmr3: { type: "string" },
        "tee-debug": { type: "boolean" },
        "tee-replay": { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (values.help === true) return "help";
  if (values.id === undefined) throw new UsageError("--id is required");
  if (values.model === undefined || values.model.length === 0) {
    throw new UsageError("at least one --model is required");
  }
  if (!SIM_FLAVOURS.includes(values.flavour as SimFlavour)) {
    throw new UsageError(`--flavour: expected one of ${SIM_FLAVOURS.join(", ")}`);
  }
  if (!SIM_PROTOCOLS.includes(values.protocol as SimProtocol)) {
    throw new UsageError(`--protocol: expected one of ${SIM_PROTOCOLS.join(", ")}`);
  }
  const keyFile = values["tls-key-file"];
  const certFile = values["tls-cert-file"];
  if ((keyFile === undefined) !== (certFile === undefined)) {
    throw new UsageError("--tls-key-file and --tls-cert-file go together");
  }
  const options: SimNodeOptions = {
    nodeId: values.id,
    protocol: values.protocol as SimProtocol,
    flavour: values.flavour as SimFlavour,
    models: values.model,
    host: values.host,
    port: numberArg("port", values.port) ?? 0,
  };
  const ttftMs = numberArg("ttft-ms", values["ttft-ms"]);
  const tokensPerSecond = numberArg("tps", values.tps);
  const maxConcurrency = numberArg("max-concurrency", values["max-concurrency"]);
  const completionTokens = numberArg("completion-tokens", values["completion-tokens"]);
  if (ttftMs !== undefined) options.ttftMs = ttftMs;
  if (tokensPerSecond !== undefined) options.tokensPerSecond = tokensPerSecond;
  if (maxConcurrency !== undefined) options.maxConcurrency = maxConcurrency;
  if (completionTokens !== undefined) options.completionTokens = completionTokens;
  if (values["instance-id"] !== undefined) options.instanceId = values["instance-id"];
  if (values.reply !== undefined) options.reply = values.reply;
  const engine = {
    kvCacheBlocks: numberArg("kv-cache-blocks", values["kv-cache-blocks"]),
    prefillTokensPerSecond: numberArg("prefill-tps", values["prefill-tps"]),
    stepBaseMs: numberArg("step-base-ms", values["step-base-ms"]),
    stepPerSequenceMs: numberArg("step-per-seq-ms", values["step-per-seq-ms"]),
  };
  const engineSet = Object.entries(engine).filter(([, v]) => v !== undefined);
  if (values.engine === true || engineSet.length > 0)
    options.engine = Object.fromEntries(engineSet);
  if (keyFile !== undefined && certFile !== undefined) {
    options.certificate = { keyPem: readPem(keyFile), certPem: readPem(certFile) };
  }
  const measurements = {
    ...(values.mrtd === undefined ? {} : { mrtd: values.mrtd }),
    ...(values.rtmr0 === undefined ? {} : { rtmr0: values.rtmr0 }),
    ...(values.rtmr1 === undefined ? {} : { rtmr1: values.rtmr1 }),
    ...(values.rtmr2 === undefined ? {} : { rtmr2: values.rtmr2 }),
    ...(values.rtmr3 === undefined ? {} : { rtmr3: values.rtmr3 }),
  };
  const teeDir = values["tee-dir"];
  if (teeDir === undefined) {
    const stray = [
      ...Object.keys(measurements),
      values["tee-debug"] ? "tee-debug" : "",
      values["tee-replay"] ? "tee-replay" : "",
    ];
    const first = stray.find(Boolean);
    if (first) throw new UsageError(`--${first} needs --tee-dir`);
    return { options, tee: undefined };
  }
  if (measurements.mrtd === undefined) throw new UsageError("--tee-dir needs --mrtd");
  return {
    options,
    tee: {
      dir: teeDir,
      measurements,
      debug: values["tee-debug"] === true,
      replay: values["tee-replay"] === true,
    },
  };
}

async function main(): Promise<void> {
  let parsed: ParsedArgs | "help";
  try {
    parsed = parseOptions(process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`zml-node-sim: ${error.message}\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  if (parsed === "help") {
    process.stdout.write(USAGE);
    return;
  }
  const { options, tee } = parsed;

  let node;
  let rootPemFile: string | undefined;
  try {
    if (tee !== undefined) {
      const material = await loadTestTeeMaterial(tee.dir);
      rootPemFile = material.rootPemFile;
      options.tee = {
        signer: material.signer,
        mrtd: tee.measurements.mrtd ?? "",
        ...tee.measurements,
        debug: tee.debug,
        replayQuote: tee.replay,
        collateral: material.collateral,
      };
    }
    node = await startSimNode(options);
  } catch (error) {
    const usage = error instanceof SimInputError;
    process.stderr.write(`zml-node-sim: ${(error as Error).message}\n${usage ? USAGE : ""}`);
    process.exitCode = usage ? 2 : 1;
    return;
  }

  const shutdown = (): void => {
    // Once closed nothing keeps the event loop alive, so the process exits with code 0.
    node.close().then(
      () => {},
      (error: unknown) => {
        process.stderr.write(`zml-node-sim: close failed: ${String(error)}\n`);
        process.exitCode = 1;
      },
    );
  };
  process.once("SIGTERM", shutdown);
  process.once("SIGINT", shutdown);
  const ready = {
    event: "ready",
    node_id: node.nodeId,
    url: node.url,
    instance_id: node.instanceId,
    ...(rootPemFile === undefined ? {} : { tee_root_pem_file: rootPemFile }),
  };
  process.stdout.write(`${JSON.stringify(ready)}\n`);
}

await main();
