// The verifier: a pure function of the quote, the collateral, the pinned root, a policy and
// the time. Every failure is reported as data (a failed check), never thrown.
import { X509Certificate, createHash, createPublicKey, type KeyObject } from "node:crypto";
import { CheckList, verifySha256, type Check } from "./check.ts";
import { checkCollateral } from "./collateral-checks.ts";
import type { Collateral, TcbStatus } from "./collateral.ts";
import { commonName, iso, validityProblem, verifyChain } from "./certs.ts";
import { DerError, parsePckExtension, type PckExtension } from "./der.ts";
import { QuoteParseError } from "./errors.ts";
import {
  isDebugTd,
  matchMeasurements,
  normalisePolicy,
  reportDataMatches,
  type VerificationPolicy,
} from "./policy.ts";
import {
  INTEL_QE_VENDOR_ID,
  parseQuote,
  type QeReport,
  type TdReportBody,
  type TdxQuote,
} from "./quote.ts";

const PCK_NAMES = [
  ["Intel SGX PCK Certificate"],
  ["Intel SGX PCK Platform CA", "Intel SGX PCK Processor CA"],
  ["Intel SGX Root CA"],
] as const;

/** MRSIGNER of Intel's TD Quoting Enclave. */
const INTEL_TD_QE_MRSIGNER = "dc9e2a7c6f948f17474e34a7fc43ed030f7c1563f1babddf6340c82e0e54a8c5";
const TD_QE_ISVPRODID = 2;

/** Inputs of {@link verifyQuote}. */
export interface VerifyQuoteOptions {
  /** A parsed quote, or raw bytes / hex / base64 to parse. */
  quote: TdxQuote | Uint8Array | string;
  /** Intel collateral for TCB status and revocation; without it only (a)–(e) + policy run. */
  collateral?: Collateral;
  /** The verification time: certificates, CRLs and collateral must be valid at it. */
  at: Date;
  /** PEM of the trust anchor, normally {@link INTEL_SGX_ROOT_CA_PEM}. */
  trustedRootPem: string;
  policy?: VerificationPolicy;
}

/** The quote header and TD report fields, hex strings for every byte field. */
export type QuoteFields = TdReportBody & {
  version: 4 | 5;
  body_type: 2 | 3;
  qe_vendor_id: string;
  user_data: string;
};

/** What the PCK certificate says about the platform. */
export interface PckInfo {
  serial: string;
  issuer: string;
  notBefore: Date;
  notAfter: Date;
  fmspc: string;
  pceid: string;
  pcesvn: number;
  cpusvn: string;
  sgxTcbComponents: number[];
}

/** The outcome of {@link verifyQuote}. */
export interface VerificationResult {
  /** True only when every check passed. */
  ok: boolean;
  /** `name: detail` of the first failed check; null when ok. */
  reason: string | null;
  checks: Check[];
  /** Null when the quote did not parse. */
  fields: QuoteFields | null;
  qeReport: QeReport | null;
  pck: PckInfo | null;
  pckSerial: string | null;
  fmspc: string | null;
  /** Merged platform/QE/module status; null without (valid) collateral. */
  tcbStatus: TcbStatus | null;
  advisoryIds: string[];
  /** Id (or `#index`) of the approved measurement set that matched. */
  matchedMeasurementSet: string | null;
  /**
   * Earliest notAfter / nextUpdate among the certificates and collateral used: a cached
   * result must not be trusted past it. Null when nothing could be read.
   */
  expiresAt: Date | null;
  verifiedAt: Date;
}

/**
 * Verifies a TDX quote v4/v5: PCK chain to the pinned root, QE report signature and
 * binding, quote signature, and — with collateral — CRLs, signed TCB info and QE identity,
 * TCB level and status; then the policy (debug, measurements, REPORTDATA).
 * Returns `ok: false` with the failed checks for any bad input; throws only on programmer
 * error (invalid `at`, unparseable `trustedRootPem`, malformed policy).
 */
export function verifyQuote(options: VerifyQuoteOptions): VerificationResult {
  const { at } = options;
  if (!(at instanceof Date) || Number.isNaN(at.getTime())) {
    throw new TypeError("verifyQuote: `at` must be a valid Date");
  }
  const root = loadRoot(options.trustedRootPem);
  const policy = normalisePolicy(options.policy);
  const checks = new CheckList();
  const result: VerificationResult = {
    ok: false,
    reason: null,
    checks: checks.checks,
    fields: null,
    qeReport: null,
    pck: null,
    pckSerial: null,
    fmspc: null,
    tcbStatus: null,
    advisoryIds: [],
    matchedMeasurementSet: null,
    expiresAt: null,
    verifiedAt: at,
  };

  let quote: TdxQuote;
  if (typeof options.quote === "string" || options.quote instanceof Uint8Array) {
    try {
      quote = parseQuote(options.quote);
    } catch (err) {
      checks.add("quote_format", false, err instanceof QuoteParseError ? err.message : String(err));
      return finish(result);
    }
  } else {
    quote = options.quote;
  }
  result.fields = {
    version: quote.header.version,
    body_type: quote.bodyType,
    qe_vendor_id: quote.header.qe_vendor_id,
    user_data: quote.header.user_data,
    ...quote.body,
  };
  result.qeReport = quote.qeReport;
  checks.add(
    "quote_format",
    true,
    `v${quote.header.version}, TD report ${quote.bodyType === 3 ? "1.5" : "1.0"}, ${quote.bytes.length} bytes` +
      (quote.trailingBytes > 0 ? ` (+${quote.trailingBytes} trailing bytes ignored)` : ""),
  );
  checks.add(
    "qe_vendor",
    quote.header.qe_vendor_id === INTEL_QE_VENDOR_ID,
    `QE vendor ${quote.header.qe_vendor_id}`,
  );

  const expiries: Date[] = [];
  const chain = verifyChain(quote.pckCertChainPem, root, PCK_NAMES);
  const pckChain = typeof chain === "string" ? undefined : chain.certs;
  let pckExtension: PckExtension | undefined;
  if (!pckChain) {
    checks.add("pck_chain", false, chain as string);
  } else {
    checks.add(
      "pck_chain",
      true,
      pckChain.map((c) => commonName(c.subject)).join(" → ") + " (pinned)",
    );
    expiries.push(...pckChain.map((c) => c.validToDate));
    const expired = validityProblem(pckChain, at);
    checks.add("pck_chain_validity", !expired, expired ?? `all valid at ${iso(at)}`);
    pckExtension = checkPckExtension(checks, pckChain, result);
    checkQeReportSignature(checks, quote, pckChain[0]!.publicKey);
  }
  checkQeReportData(checks, quote);
  checkQeReportIdentity(checks, quote);
  checkQuoteSignature(checks, quote);

  if (options.collateral !== undefined) {
    const outcome = checkCollateral(
      { collateral: options.collateral, quote, at, root, pckChain, pckExtension, policy },
      checks,
    );
    result.tcbStatus = outcome.tcbStatus;
    result.advisoryIds = outcome.advisoryIds;
    expiries.push(...outcome.expiries);
  } else if (policy.requireCollateral) {
    checks.add("collateral_required", false, "policy requires collateral and none was given");
  }

  const debug = isDebugTd(quote.body);
  checks.add(
    "td_debug",
    !debug || policy.allowDebug,
    `DEBUG ${debug ? "set" : "clear"} (td_attributes ${quote.body.td_attributes})${debug && policy.allowDebug ? ", allowed by policy" : ""}`,
  );
  if (quote.body.mrservicetd !== null) {
    const bound = /[^0]/.test(quote.body.mrservicetd);
    checks.add("mrservicetd", !bound, bound ? "a service TD is bound" : "no service TD bound");
  }
  if (policy.approvedMeasurements) {
    const matched = matchMeasurements(quote.body, policy.approvedMeasurements);
    result.matchedMeasurementSet = matched ?? null;
    checks.add(
      "measurements",
      matched !== undefined,
      matched !== undefined
        ? `matches approved set ${matched}`
        : `MRTD ${quote.body.mrtd} and RTMRs match no approved set`,
    );
  }
  if (policy.expectedReportData) {
    const ok = reportDataMatches(quote.body, policy.expectedReportData);
    checks.add(
      "report_data",
      ok,
      ok ? "REPORTDATA matches" : "REPORTDATA differs from the expected value",
    );
  }

  result.expiresAt =
    expiries.length > 0 ? new Date(Math.min(...expiries.map((d) => d.getTime()))) : null;
  return finish(result);
}

function finish(result: VerificationResult): VerificationResult {
  const failed = result.checks.find((c) => !c.ok);
  result.ok = failed === undefined && result.checks.length > 0;
  result.reason = failed ? `${failed.name}: ${failed.detail}` : null;
  return result;
}

function loadRoot(pem: string): X509Certificate {
  try {
    return new X509Certificate(pem);
  } catch {
    throw new TypeError("verifyQuote: trustedRootPem is not a PEM certificate");
  }
}

function checkPckExtension(
  checks: CheckList,
  pckChain: X509Certificate[],
  result: VerificationResult,
): PckExtension | undefined {
  const leaf = pckChain[0]!;
  try {
    const ext = parsePckExtension(new Uint8Array(leaf.raw));
    result.pck = {
      serial: leaf.serialNumber,
      issuer: commonName(leaf.issuer) ?? leaf.issuer,
      notBefore: leaf.validFromDate,
      notAfter: leaf.validToDate,
      fmspc: ext.fmspc,
      pceid: ext.pceid,
      pcesvn: ext.pcesvn,
      cpusvn: ext.cpusvn,
      sgxTcbComponents: ext.sgxTcbComponents,
    };
    result.pckSerial = leaf.serialNumber;
    result.fmspc = ext.fmspc;
    checks.add("pck_extension", true, `FMSPC ${ext.fmspc}, PCESVN ${ext.pcesvn}`);
    return ext;
  } catch (err) {
    checks.add("pck_extension", false, err instanceof DerError ? err.message : String(err));
    return undefined;
  }
}

function checkQeReportSignature(checks: CheckList, quote: TdxQuote, pckKey: KeyObject): void {
  const ok = verifySha256(quote.qeReportBytes, pckKey, quote.qeReportSignature, "ieee-p1363");
  checks.add(
    "qe_report_signature",
    ok,
    ok ? "signed by the PCK key" : "does not verify with the PCK key",
  );
}

/** QE REPORTDATA = SHA-256(attestation key ‖ QE auth data) ‖ 32 zero bytes. */
function checkQeReportData(checks: CheckList, quote: TdxQuote): void {
  const digest = createHash("sha256")
    .update(quote.attestationKey)
    .update(quote.qeAuthData)
    .digest("hex");
  const ok = quote.qeReport.reportdata === digest + "0".repeat(64);
  checks.add(
    "qe_report_data",
    ok,
    ok ? "binds the attestation key" : "does not bind the attestation key and QE auth data",
  );
}

/** Offline sanity of the QE: Intel's TD-QE, not a debug enclave (collateral refines it). */
function checkQeReportIdentity(checks: CheckList, quote: TdxQuote): void {
  const qe = quote.qeReport;
  const debug = (Number.parseInt(qe.attributes.slice(0, 2), 16) & 0x02) !== 0;
  const problems = [
    qe.mrsigner !== INTEL_TD_QE_MRSIGNER ? `MRSIGNER ${qe.mrsigner} is not Intel's TD-QE` : "",
    qe.isvprodid !== TD_QE_ISVPRODID ? `ISVPRODID ${qe.isvprodid} is not 2` : "",
    debug ? "QE is a debug enclave" : "",
  ].filter(Boolean);
  checks.add(
    "qe_report_identity",
    problems.length === 0,
    problems.length === 0 ? `Intel TD-QE, ISVSVN ${qe.isvsvn}` : problems.join("; "),
  );
}

function checkQuoteSignature(checks: CheckList, quote: TdxQuote): void {
  const key = attestationPublicKey(quote.attestationKey);
  const ok =
    key !== undefined && verifySha256(quote.signedRegion, key, quote.signature, "ieee-p1363");
  checks.add(
    "quote_signature",
    ok,
    ok
      ? "header and body signed by the attestation key"
      : key
        ? "does not verify with the attestation key"
        : "attestation key is not a P-256 point",
  );
}

function attestationPublicKey(raw: Uint8Array): KeyObject | undefined {
  if (raw.length !== 64) return undefined;
  try {
    return createPublicKey({
      format: "jwk",
      key: {
        kty: "EC",
        crv: "P-256",
        x: Buffer.from(raw.subarray(0, 32)).toString("base64url"),
        y: Buffer.from(raw.subarray(32)).toString("base64url"),
      },
    });
  } catch {
    return undefined;
  }
}
