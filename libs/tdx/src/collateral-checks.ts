// Checks that need Intel's collateral: CRLs, signed TCB info and QE identity, TCB status.
import type { X509Certificate } from "node:crypto";
import { fromHex } from "./bytes.ts";
import { verifySha256, type CheckList } from "./check.ts";
import {
  asCollateral,
  parseQeIdentity,
  parseTcbInfo,
  type Collateral,
  type QeIdentity,
  type TcbInfo,
  type TcbStatus,
} from "./collateral.ts";
import { commonName, iso, validityProblem, verifyChain } from "./certs.ts";
import { DerError, normaliseSerial, parseCrl, type Crl, type PckExtension } from "./der.ts";
import type { NormalisedPolicy } from "./policy.ts";
import { extractPemCertificates, type TdxQuote } from "./quote.ts";
import { CollateralFormatError } from "./shape.ts";
import {
  convergeTcbStatus,
  matchPlatformTcbLevel,
  matchQeIdentity,
  matchTdxModule,
} from "./tcb.ts";

const TCB_SIGNING_NAMES = [["Intel SGX TCB Signing"], ["Intel SGX Root CA"]] as const;

export interface CollateralInput {
  collateral: unknown;
  quote: TdxQuote;
  at: Date;
  root: X509Certificate;
  /** The verified PCK chain (leaf, intermediate, root), when it verified. */
  pckChain: X509Certificate[] | undefined;
  pckExtension: PckExtension | undefined;
  policy: NormalisedPolicy;
}

export interface CollateralOutcome {
  tcbStatus: TcbStatus | null;
  advisoryIds: string[];
  /** notAfter / nextUpdate of everything the verdict relied on. */
  expiries: Date[];
}

/** Runs every collateral check into `checks`; returns the TCB status when one was reached. */
export function checkCollateral(input: CollateralInput, checks: CheckList): CollateralOutcome {
  const outcome: CollateralOutcome = { tcbStatus: null, advisoryIds: [], expiries: [] };
  let collateral: Collateral;
  try {
    collateral = asCollateral(input.collateral);
  } catch (err) {
    checks.add("collateral_format", false, messageOf(err));
    return outcome;
  }
  checks.add("collateral_format", true, "dcap-qvl QuoteCollateralV3 fields present");
  const { at, root, pckChain } = input;

  const rootCrl = checkCrl(checks, "root_ca_crl", collateral.root_ca_crl, root, at, pckChain?.[1]);
  if (rootCrl?.nextUpdate) outcome.expiries.push(rootCrl.nextUpdate);
  if (pckChain?.[1]) {
    const pckCrl = checkCrl(checks, "pck_crl", collateral.pck_crl, pckChain[1], at, pckChain[0]);
    if (pckCrl?.nextUpdate) outcome.expiries.push(pckCrl.nextUpdate);
  }

  const tcbInfo = checkSignedDocument(checks, {
    kind: "tcb_info",
    chainPem: collateral.tcb_info_issuer_chain,
    text: collateral.tcb_info,
    signatureHex: collateral.tcb_info_signature,
    root,
    at,
    rootCrl,
    expiries: outcome.expiries,
    parse: (text) => {
      const info = parseTcbInfo(text);
      if (info.id !== "TDX" || info.version < 3) {
        throw new CollateralFormatError(`TCB info ${info.id} v${info.version} is not TDX v3+`);
      }
      return info;
    },
    describe: (info) => `TDX TCB info v${info.version}, FMSPC ${info.fmspc}`,
  });
  const qeIdentity = checkSignedDocument(checks, {
    kind: "qe_identity",
    chainPem: collateral.qe_identity_issuer_chain,
    text: collateral.qe_identity,
    signatureHex: collateral.qe_identity_signature,
    root,
    at,
    rootCrl,
    expiries: outcome.expiries,
    parse: (text) => {
      const identity = parseQeIdentity(text);
      if (identity.id !== "TD_QE" || (identity.version !== 2 && identity.version !== 3)) {
        throw new CollateralFormatError(
          `QE identity ${identity.id} v${identity.version} is not TD_QE v2/v3`,
        );
      }
      return identity;
    },
    describe: (identity) => `TD_QE identity v${identity.version}`,
  });

  const statuses = evaluateTcb(checks, input, tcbInfo, qeIdentity, outcome);
  if (!statuses) return outcome;
  const acceptable = input.policy.acceptableTcbStatuses.includes(statuses);
  const advisories =
    outcome.advisoryIds.length > 0 ? `, advisories ${outcome.advisoryIds.join(" ")}` : "";
  checks.add(
    "tcb_status",
    acceptable,
    `${statuses}${advisories}${acceptable ? "" : ` (accepted: ${input.policy.acceptableTcbStatuses.join(", ") || "none"})`}`,
  );
  return outcome;
}

/** QE identity, FMSPC/PCE-ID, TDX module and platform level; returns the merged status. */
function evaluateTcb(
  checks: CheckList,
  input: CollateralInput,
  tcbInfo: TcbInfo | undefined,
  qeIdentity: QeIdentity | undefined,
  outcome: CollateralOutcome,
): TcbStatus | undefined {
  const { quote, pckExtension } = input;
  let qeStatus: TcbStatus | undefined;
  if (qeIdentity) {
    const qe = matchQeIdentity(qeIdentity, quote.qeReport);
    if ("problem" in qe) {
      checks.add("qe_identity_match", false, qe.problem);
    } else {
      qeStatus = qe.level.tcbStatus;
      outcome.advisoryIds.push(...qe.level.advisoryIds);
      checks.add("qe_identity_match", true, `QE ISVSVN ${quote.qeReport.isvsvn}: ${qeStatus}`);
    }
  }
  if (!tcbInfo || !pckExtension) return undefined;

  const fmspcOk = tcbInfo.fmspc === pckExtension.fmspc && tcbInfo.pceId === pckExtension.pceid;
  checks.add(
    "tcb_info_match",
    fmspcOk,
    fmspcOk
      ? `FMSPC ${pckExtension.fmspc}, PCE-ID ${pckExtension.pceid}`
      : `TCB info is for FMSPC ${tcbInfo.fmspc}/PCE-ID ${tcbInfo.pceId}, PCK has ${pckExtension.fmspc}/${pckExtension.pceid}`,
  );

  const module = matchTdxModule(tcbInfo, quote.body);
  let moduleStatus: TcbStatus | undefined;
  if ("problem" in module) {
    checks.add("tdx_module", false, module.problem);
  } else if (module.level) {
    moduleStatus = module.level.tcbStatus;
    outcome.advisoryIds.push(...module.level.advisoryIds);
    checks.add("tdx_module", true, `${module.id}: ${moduleStatus}`);
  } else {
    checks.add("tdx_module", true, "TDX 1.0 module signer and attributes match");
  }

  const teeTcbSvn = Buffer.from(quote.body.tee_tcb_svn, "hex");
  const level = matchPlatformTcbLevel(tcbInfo, pckExtension, teeTcbSvn);
  if (!level) {
    checks.add(
      "tcb_level",
      false,
      `no matching TCB level: PCK SGX components ${pckExtension.sgxTcbComponents.join(",")} PCESVN ${pckExtension.pcesvn}, TEE_TCB_SVN ${quote.body.tee_tcb_svn}`,
    );
    return undefined;
  }
  outcome.advisoryIds.push(...level.advisoryIds);
  checks.add("tcb_level", true, `${level.tcbStatus} (level of ${level.tcbDate})`);

  if (!fmspcOk || qeStatus === undefined || "problem" in module) return undefined;
  let status = convergeTcbStatus(level.tcbStatus, qeStatus);
  if (moduleStatus) status = convergeTcbStatus(status, moduleStatus);
  outcome.tcbStatus = status;
  outcome.advisoryIds = [...new Set(outcome.advisoryIds)];
  return status;
}

/** Checks a CRL's signature by `issuer`, its freshness at `at`, and that `subject` is not on it. */
function checkCrl(
  checks: CheckList,
  name: "root_ca_crl" | "pck_crl",
  hex: string,
  issuer: X509Certificate,
  at: Date,
  subject: X509Certificate | undefined,
): Crl | undefined {
  const der = fromHex(hex);
  if (!der) {
    checks.add(name, false, "not hex");
    return undefined;
  }
  let crl: Crl;
  try {
    crl = parseCrl(der);
  } catch (err) {
    checks.add(name, false, messageOf(err));
    return undefined;
  }
  const issuerName = commonName(issuer.subject) ?? "issuer";
  if (!verifySha256(crl.tbs, issuer.publicKey, crl.signature, "der")) {
    checks.add(name, false, `signature does not verify with ${issuerName}`);
    return undefined;
  }
  if (!crl.nextUpdate || at < crl.thisUpdate || at > crl.nextUpdate) {
    const window = `${iso(crl.thisUpdate)} → ${crl.nextUpdate ? iso(crl.nextUpdate) : "(no nextUpdate)"}`;
    checks.add(name, false, `expired: valid ${window}`);
    return crl;
  }
  if (subject && crl.revokedSerials.has(normaliseSerial(subject.serialNumber))) {
    checks.add(
      name,
      false,
      `${commonName(subject.subject) ?? "certificate"} ${subject.serialNumber} is revoked`,
    );
    return crl;
  }
  checks.add(
    name,
    true,
    `signed by ${issuerName}, valid to ${iso(crl.nextUpdate)}, ${crl.revokedSerials.size} revoked serials${subject ? `, ${commonName(subject.subject) ?? "certificate"} not among them` : ""}`,
  );
  return crl;
}

interface SignedDocument<T> {
  kind: "tcb_info" | "qe_identity";
  chainPem: string;
  text: string;
  signatureHex: string;
  root: X509Certificate;
  at: Date;
  rootCrl: Crl | undefined;
  expiries: Date[];
  parse: (text: string) => T;
  describe: (doc: T) => string;
}

/** Signature (by Intel SGX TCB Signing → pinned root), shape and freshness of a signed document. */
function checkSignedDocument<T extends { issueDate: Date; nextUpdate: Date }>(
  checks: CheckList,
  doc: SignedDocument<T>,
): T | undefined {
  const signatureCheck = `${doc.kind}_signature` as const;
  const chain = verifyChain(extractPemCertificates(doc.chainPem), doc.root, TCB_SIGNING_NAMES);
  const signature = fromHex(doc.signatureHex);
  if (typeof chain === "string") {
    checks.add(signatureCheck, false, `issuer chain: ${chain}`);
  } else {
    const [signer] = chain.certs;
    doc.expiries.push(...chain.certs.map((c) => c.validToDate));
    const expired = validityProblem(chain.certs, doc.at);
    if (!signer) {
      checks.add(signatureCheck, false, "issuer chain is empty");
    } else if (expired) {
      checks.add(signatureCheck, false, `issuer chain: ${expired}`);
    } else if (doc.rootCrl?.revokedSerials.has(normaliseSerial(signer.serialNumber))) {
      checks.add(
        signatureCheck,
        false,
        `TCB Signing certificate ${signer.serialNumber} is revoked`,
      );
    } else if (!signature || signature.length !== 64) {
      checks.add(signatureCheck, false, "signature is not 64 bytes of hex");
    } else if (
      !verifySha256(Buffer.from(doc.text, "utf8"), signer.publicKey, signature, "ieee-p1363")
    ) {
      checks.add(signatureCheck, false, "signature does not verify with Intel SGX TCB Signing");
    } else {
      checks.add(signatureCheck, true, `signed by Intel SGX TCB Signing ${signer.serialNumber}`);
    }
  }

  let parsed: T;
  try {
    parsed = doc.parse(doc.text);
  } catch (err) {
    checks.add(`${doc.kind}_format`, false, messageOf(err));
    return undefined;
  }
  checks.add(`${doc.kind}_format`, true, doc.describe(parsed));
  doc.expiries.push(parsed.nextUpdate);
  const fresh = doc.at >= parsed.issueDate && doc.at <= parsed.nextUpdate;
  checks.add(
    `${doc.kind}_freshness`,
    fresh,
    `${fresh ? "valid" : "expired: valid"} ${iso(parsed.issueDate)} → ${iso(parsed.nextUpdate)}`,
  );
  return parsed;
}

function messageOf(err: unknown): string {
  if (err instanceof CollateralFormatError || err instanceof DerError) return err.message;
  return `unexpected: ${String(err)}`;
}
