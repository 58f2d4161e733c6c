// `zml verify-quote`: the command behind the CLI, with its I/O injected so it can be tested.
import { X509Certificate } from "node:crypto";
import { parseArgs } from "node:util";
import type { Collateral } from "./collateral.ts";
import { INTEL_SGX_ROOT_CA_PEM } from "./intel-root-ca.ts";
import { certificateKeySha256, reportDataFor, spkiSha256 } from "./report-data.ts";
import { verifyQuote, type VerificationResult } from "./verify.ts";

/** What the command may touch; `now` defaults to the wall clock. */
export interface VerifyQuoteCommandIo {
  stdout: (s: string) => void;
  stderr: (s: string) => void;
  readFile: (path: string) => Uint8Array;
  now?: () => Date;
}

const USAGE = `usage: zml verify-quote <quote-file> [--collateral <json>] [--at <ISO time>] [--root <pem>]
         [--nonce <hex> (--tls-key-sha256 <hex> | --tls-cert <pem>) [--session-key <base64>]] [--json]

  <quote-file>            TDX quote v4/v5: binary, hex or base64
  --collateral <json>     Intel collateral, dcap-qvl QuoteCollateralV3 JSON (TCB status, CRLs)
  --at <ISO time>         verification time (default: now)
  --root <pem>            trust anchor (default: the pinned Intel SGX Root CA)
  --nonce <hex>           the verifier's nonce (32 bytes): check REPORTDATA's channel binding
  --tls-key-sha256 <hex>  SHA-256 of the node's TLS public key (SPKI DER) it must bind
  --tls-cert <pem>        or the node's TLS certificate, whose key it must bind
  --session-key <base64>  a tier-4 session public key (SPKI DER, base64) it must bind too
  --json                  print the result as JSON

exit status: 0 verified, 1 not verified, 2 usage error
`;

class UsageError extends Error {}

/**
 * Runs `verify-quote` with the arguments after the program name (a leading `verify-quote`
 * token is accepted and skipped). Prints the parsed fields, every check with ✓/✗ and the
 * verdict (or JSON with `--json`). Returns 0 when the quote verifies, 1 when it does not,
 * 2 for usage errors (bad flags, unreadable files, malformed collateral JSON or root PEM).
 */
export function runVerifyQuoteCommand(argv: string[], io: VerifyQuoteCommandIo): number {
  const args = argv[0] === "verify-quote" ? argv.slice(1) : argv;
  let result: VerificationResult;
  let json: boolean;
  try {
    const parsed = parseCommandArgs(args);
    if (parsed === "help") {
      io.stdout(USAGE);
      return 0;
    }
    json = parsed.json;
    result = verifyQuote({
      quote: quoteInput(read(io, parsed.file, "quote")),
      collateral:
        parsed.collateral === undefined ? undefined : readCollateral(io, parsed.collateral),
      at: parsed.at ?? io.now?.() ?? new Date(),
      trustedRootPem: parsed.root === undefined ? INTEL_SGX_ROOT_CA_PEM : readRoot(io, parsed.root),
      policy: reportDataPolicy(io, parsed),
    });
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    io.stderr(`zml verify-quote: ${err.message}\n\n${USAGE}`);
    return 2;
  }
  io.stdout(json ? `${JSON.stringify(toJson(result), null, 2)}\n` : formatText(result));
  return result.ok ? 0 : 1;
}

interface CommandArgs {
  file: string;
  collateral: string | undefined;
  at: Date | undefined;
  root: string | undefined;
  json: boolean;
  nonce: string | undefined;
  tlsKeySha256: string | undefined;
  tlsCert: string | undefined;
  sessionKey: string | undefined;
}

function parseCommandArgs(args: string[]): CommandArgs | "help" {
  let values;
  let positionals;
  try {
    ({ values, positionals } = parseArgs({
      args,
      allowPositionals: true,
      strict: true,
      options: {
        collateral: { type: "string" },
        at: { type: "string" },
        root: { type: "string" },
        nonce: { type: "string" },
        "tls-key-sha256": { type: "string" },
        "tls-cert": { type: "string" },
        "session-key": { type: "string" },
        json: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    }));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (values.help) return "help";
  if (positionals.length !== 1 || positionals[0] === undefined) {
    throw new UsageError(`expected exactly one quote file, got ${positionals.length}`);
  }
  let at: Date | undefined;
  if (values.at !== undefined) {
    at = new Date(values.at);
    if (Number.isNaN(at.getTime())) throw new UsageError(`--at ${values.at} is not an ISO time`);
  }
  return {
    file: positionals[0],
    collateral: values.collateral,
    at,
    root: values.root,
    json: values.json,
    nonce: values.nonce,
    tlsKeySha256: values["tls-key-sha256"],
    tlsCert: values["tls-cert"],
    sessionKey: values["session-key"],
  };
}

const HEX32 = /^[0-9a-fA-F]{64}$/;

/** The expected REPORTDATA of the binding flags (see `reportDataFor`), or no policy without them. */
function reportDataPolicy(
  io: VerifyQuoteCommandIo,
  args: CommandArgs,
): { expectedReportData: string } | undefined {
  const { nonce, tlsKeySha256, tlsCert, sessionKey } = args;
  if (nonce === undefined) {
    if (tlsKeySha256 !== undefined || tlsCert !== undefined || sessionKey !== undefined) {
      throw new UsageError("--tls-key-sha256, --tls-cert and --session-key need --nonce");
    }
    return undefined;
  }
  if (!HEX32.test(nonce)) throw new UsageError("--nonce must be 32 bytes of hex");
  if ((tlsKeySha256 === undefined) === (tlsCert === undefined)) {
    throw new UsageError("--nonce needs exactly one of --tls-key-sha256 and --tls-cert");
  }
  let tlsKey = tlsKeySha256;
  if (tlsKey !== undefined && !HEX32.test(tlsKey)) {
    throw new UsageError("--tls-key-sha256 must be 32 bytes of hex");
  }
  if (tlsCert !== undefined) {
    try {
      tlsKey = certificateKeySha256(Buffer.from(read(io, tlsCert, "TLS certificate")).toString());
    } catch (err) {
      if (err instanceof UsageError) throw err;
      throw new UsageError(`TLS certificate ${tlsCert} is not a PEM certificate`);
    }
  }
  let sessionKeySha256: string | undefined;
  if (sessionKey !== undefined) {
    const der = Buffer.from(sessionKey, "base64");
    if (der.length === 0 || der.toString("base64") !== sessionKey) {
      throw new UsageError("--session-key must be canonical base64 of the key's SPKI DER");
    }
    sessionKeySha256 = spkiSha256(der);
  }
  return {
    expectedReportData: reportDataFor({ nonce, tlsKeySha256: tlsKey!, sessionKeySha256 }),
  };
}

function read(io: VerifyQuoteCommandIo, path: string, what: string): Uint8Array {
  try {
    return io.readFile(path);
  } catch (err) {
    throw new UsageError(`cannot read ${what} ${path}: ${(err as Error).message}`);
  }
}

/** Binary quotes start with version 4 or 5 (LE u16); anything else is hex or base64 text. */
function quoteInput(bytes: Uint8Array): Uint8Array | string {
  if ((bytes[0] === 4 || bytes[0] === 5) && bytes[1] === 0) return bytes;
  return Buffer.from(bytes).toString("utf8");
}

function readCollateral(io: VerifyQuoteCommandIo, path: string): Collateral {
  try {
    return JSON.parse(Buffer.from(read(io, path, "collateral")).toString("utf8")) as Collateral;
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`collateral ${path} is not JSON`);
  }
}

function readRoot(io: VerifyQuoteCommandIo, path: string): string {
  const pem = Buffer.from(read(io, path, "root")).toString("utf8");
  try {
    new X509Certificate(pem);
  } catch {
    throw new UsageError(`root ${path} is not a PEM certificate`);
  }
  return pem;
}

function toJson(result: VerificationResult): unknown {
  return {
    ok: result.ok,
    reason: result.reason,
    verifiedAt: result.verifiedAt,
    expiresAt: result.expiresAt,
    tcbStatus: result.tcbStatus,
    advisoryIds: result.advisoryIds,
    fmspc: result.fmspc,
    pckSerial: result.pckSerial,
    fields: result.fields,
    qeReport: result.qeReport,
    pck: result.pck,
    checks: result.checks,
  };
}

function formatText(result: VerificationResult): string {
  const lines: string[] = [];
  if (result.fields) {
    lines.push(
      `Quote v${result.fields.version}, TD report ${result.fields.body_type === 3 ? "1.5" : "1.0"}`,
    );
    for (const [key, value] of Object.entries(result.fields)) {
      if (key === "version" || key === "body_type" || value === null) continue;
      lines.push(`  ${key.padEnd(16)} ${String(value)}`);
    }
  }
  if (result.pck) {
    lines.push(
      `PCK certificate ${result.pck.serial} issued by ${result.pck.issuer}, FMSPC ${result.pck.fmspc}, PCESVN ${result.pck.pcesvn}`,
    );
  }
  lines.push("Checks");
  const width = Math.max(...result.checks.map((c) => c.name.length));
  for (const check of result.checks) {
    lines.push(`  ${check.ok ? "✓" : "✗"} ${check.name.padEnd(width)}  ${check.detail}`);
  }
  lines.push(`TCB status: ${result.tcbStatus ?? "not evaluated (no collateral)"}`);
  if (result.advisoryIds.length > 0) lines.push(`Advisories: ${result.advisoryIds.join(", ")}`);
  if (result.expiresAt) lines.push(`Result expires: ${result.expiresAt.toISOString()}`);
  lines.push(
    result.ok ? "Verdict: VERIFIED" : `Verdict: NOT VERIFIED (${result.reason ?? "no checks ran"})`,
  );
  return `${lines.join("\n")}\n`;
}
