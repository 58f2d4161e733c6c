#!/usr/bin/env node
// Runs the TD proxy: `zml-td-proxy --backend http://127.0.0.1:8000 [--listen 0.0.0.0:8443]`.
// On a TDX guest quotes come from configfs-tsm; `--quote-source simulated` uses the
// simulator's test PCK chain (a dev stack, tests), never accepted where Intel's root is the
// trust anchor. Logs JSON lines; stops on SIGTERM or SIGINT. Bad arguments: exit code 2.
import { parseArgs } from "node:util";
import { createLogger } from "@zml/telemetry";
import { configfsTsmQuoter, simulatedQuoter } from "./quoter.ts";
import type { Quoter } from "./quoter.ts";
import { startTdProxy } from "./td-proxy.ts";

const USAGE = `usage: zml-td-proxy --backend <http://127.0.0.1:port> [--listen <host:port>] [--tier 3|4]
  --backend <url>          the serving framework (vLLM, TGI) on loopback inside the TD
  --listen <host:port>     where the gateway reaches the TD (default 0.0.0.0:8443)
  --tier 4                 sealed requests only (default); 3 passes plain requests through
  --passthrough <paths>    GET paths passed to the server for health probes (default /health,/metrics)
  --quote-source configfs-tsm | simulated   (default configfs-tsm: ${"/sys/kernel/config/tsm/report"})
  simulated only (test PCK chain, never Intel's):
    --sim-tee-dir <dir> --mrtd <96 hex> [--rtmr0 <hex>] ... [--rtmr3 <hex>]
  --log-level <level>      pino level (default info)
`;

class UsageError extends Error {}

interface Args {
  backend: string;
  host: string;
  port: number;
  tier: 3 | 4;
  passthrough: string[];
  quoteSource: "configfs-tsm" | "simulated";
  simTeeDir: string | undefined;
  measurements: Record<string, string>;
  logLevel: string;
}

function parse(argv: string[]): Args | "help" {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      options: {
        backend: { type: "string" },
        listen: { type: "string", default: "0.0.0.0:8443" },
        tier: { type: "string", default: "4" },
        passthrough: { type: "string", default: "/health,/metrics" },
        "quote-source": { type: "string", default: "configfs-tsm" },
        "sim-tee-dir": { type: "string" },
        mrtd: { type: "string" },
        rtmr0: { type: "string" },
        rtmr1: { type: "string" },
        rtmr2: { type: "string" },
        rtmr3: { type: "string" },
        "log-level": { type: "string", default: "info" },
        help: { type: "boolean" },
      },
    }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (values.help) return "help";
  if (values.backend === undefined) throw new UsageError("--backend is required");
  const backend = new URL(values.backend);
  if (backend.protocol !== "http:") throw new UsageError("--backend: an http:// URL on loopback");
  const listen = /^(.*):(\d{1,5})$/.exec(values.listen);
  if (!listen) throw new UsageError("--listen: expected host:port");
  if (values.tier !== "3" && values.tier !== "4") throw new UsageError("--tier: 3 or 4");
  const source = values["quote-source"];
  if (source !== "configfs-tsm" && source !== "simulated") {
    throw new UsageError("--quote-source: configfs-tsm or simulated");
  }
  const measurements: Record<string, string> = {};
  for (const field of ["mrtd", "rtmr0", "rtmr1", "rtmr2", "rtmr3"] as const) {
    const value = values[field];
    if (value === undefined) continue;
    if (source !== "simulated") throw new UsageError(`--${field} is for --quote-source simulated`);
    measurements[field] = value;
  }
  if (source === "simulated" && (values["sim-tee-dir"] === undefined || !measurements["mrtd"])) {
    throw new UsageError("--quote-source simulated needs --sim-tee-dir and --mrtd");
  }
  return {
    backend: values.backend,
    host: listen[1]!.replace(/^\[|\]$/g, ""),
    port: Number(listen[2]),
    tier: values.tier === "3" ? 3 : 4,
    passthrough: values.passthrough.split(",").filter(Boolean),
    quoteSource: source,
    simTeeDir: values["sim-tee-dir"],
    measurements,
    logLevel: values["log-level"],
  };
}

async function quoterFor(args: Args): Promise<Quoter> {
  if (args.quoteSource === "configfs-tsm") return configfsTsmQuoter();
  // Loaded only for simulated quotes: a TD image runs without the simulator installed.
  const { createReportDataQuoter, loadTestTeeMaterial } = await import("@zml/node-sim");
  const material = await loadTestTeeMaterial(args.simTeeDir!);
  return simulatedQuoter(
    createReportDataQuoter({
      signer: material.signer,
      collateral: material.collateral,
      mrtd: args.measurements["mrtd"]!,
      ...args.measurements,
    }),
  );
}

async function main(): Promise<void> {
  let args;
  try {
    args = parse(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`zml-td-proxy: ${(error as Error).message}\n\n${USAGE}`);
    process.exit(2);
  }
  if (args === "help") {
    process.stdout.write(USAGE);
    return;
  }
  const log = createLogger({ service: "td-proxy", level: args.logLevel });
  const proxy = await startTdProxy({
    backend: args.backend,
    host: args.host,
    port: args.port,
    allowPlaintext: args.tier === 3,
    passthroughPaths: args.passthrough,
    quoter: await quoterFor(args),
    log,
  });
  const stop = () => {
    void proxy.close().then(() => process.exit(0));
  };
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
}

main().catch((error: unknown) => {
  process.stderr.write(`zml-td-proxy: ${String(error)}\n`);
  process.exit(1);
});
