// A synthetic Intel-shaped PKI for tests and simulators: root, PCK Platform CA, PCK leaf with
// the SGX extension, TCB Signing, plus CRLs and signed collateral. Names copy Intel's CNs
// (the verifier checks them) but the organisation says plainly these are test certificates.
import * as asn1js from "asn1js";
import {
  X509Certificate,
  generateKeyPairSync,
  randomBytes,
  sign,
  type KeyObject,
} from "node:crypto";
import type { Collateral, TcbStatus } from "../collateral.ts";
import {
  ECDSA_SHA256,
  bigInt,
  der,
  explicit,
  int,
  name,
  octets,
  oid,
  seq,
  signed,
  spki,
  time,
  toPem,
} from "./der-builder.ts";

const TEST_ORG = "ZML test PKI - not Intel";
const SGX_EXT = "1.2.840.113741.1.13.1";
const INTEL_TD_QE_MRSIGNER = "DC9E2A7C6F948F17474E34A7FC43ED030F7C1563F1BABDDF6340C82E0E54A8C5";

/** One certificate with its private key. */
export interface TestCert {
  pem: string;
  key: KeyObject;
  serial: string;
}

/** A synthetic PKI shaped like Intel's. Pass `root.pem` as `trustedRootPem`. */
export interface TestPki {
  root: TestCert;
  platformCa: TestCert;
  pck: TestCert;
  tcbSigning: TestCert;
  /** PCK leaf, Platform CA, root: what a quote's certification data carries. */
  pckChainPem: string;
}

/** What the PCK certificate's SGX extension says about the platform. */
export interface TestPlatform {
  /** Hex, 6 bytes (default `00906ed50000`). */
  fmspc?: string;
  /** Hex, 2 bytes (default `0000`). */
  pceid?: string;
  /** Default 13. */
  pcesvn?: number;
  /** SGX TCB components 1..16 as hex (default `04040202040100050000000000000000`). */
  cpusvn?: string;
}

export interface TestPkiOptions extends TestPlatform {
  /** Validity of every certificate (default 2020-01-01 → 2049-12-31). */
  notBefore?: Date;
  notAfter?: Date;
}

function newKey(): KeyObject {
  return generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
}

function serialBytes(): Uint8Array {
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0]! & 0x7f) | 0x01; // positive, no leading zero byte
  return new Uint8Array(bytes);
}

function extension(id: string, value: asn1js.AsnType, critical = false): asn1js.Sequence {
  const parts: asn1js.AsnType[] = [oid(id)];
  if (critical) parts.push(new asn1js.Boolean({ value: true }));
  parts.push(octets(der(value)));
  return seq(...parts);
}

interface CertSpec {
  cn: string;
  issuerCn: string;
  issuerKey: KeyObject;
  key: KeyObject;
  ca: boolean;
  notBefore: Date;
  notAfter: Date;
  extra?: asn1js.Sequence[];
}

function issue(spec: CertSpec): TestCert {
  const serial = serialBytes();
  const basic = spec.ca ? seq(new asn1js.Boolean({ value: true })) : seq();
  const extensions = [extension("2.5.29.19", basic, true), ...(spec.extra ?? [])];
  const tbs = seq(
    explicit(0, int(2)),
    bigInt(serial),
    ECDSA_SHA256(),
    name(spec.issuerCn, TEST_ORG),
    seq(time(spec.notBefore), time(spec.notAfter)),
    name(spec.cn, TEST_ORG),
    spki(spec.key),
    explicit(3, seq(...extensions)),
  );
  const pem = toPem("CERTIFICATE", signed(tbs, spec.issuerKey));
  return { pem, key: spec.key, serial: new X509Certificate(pem).serialNumber };
}

function sgxExtension(platform: TestPlatform): asn1js.Sequence {
  const cpusvn = Buffer.from(platform.cpusvn ?? "04040202040100050000000000000000", "hex");
  const entry = (suffix: string, value: asn1js.AsnType): asn1js.Sequence =>
    seq(oid(`${SGX_EXT}.${suffix}`), value);
  const tcb = [...cpusvn].map((svn, i) => entry(`2.${i + 1}`, int(svn)));
  tcb.push(entry("2.17", int(platform.pcesvn ?? 13)), entry("2.18", octets(cpusvn)));
  return extension(
    SGX_EXT,
    seq(
      entry("1", octets(new Uint8Array(16))),
      entry("2", seq(...tcb)),
      entry("3", octets(Buffer.from(platform.pceid ?? "0000", "hex"))),
      entry("4", octets(Buffer.from(platform.fmspc ?? "00906ed50000", "hex"))),
      entry("5", new asn1js.Enumerated({ value: 0 })),
    ),
  );
}

/**
 * Generates a fresh synthetic PKI: a self-signed "Intel SGX Root CA", an "Intel SGX PCK
 * Platform CA", a PCK leaf carrying the SGX extension for `options`, and an "Intel SGX TCB
 * Signing" certificate. Every key is a new P-256 key. For tests and simulators only.
 */
export function createTestPki(options: TestPkiOptions = {}): TestPki {
  const notBefore = options.notBefore ?? new Date("2020-01-01T00:00:00Z");
  const notAfter = options.notAfter ?? new Date("2049-12-31T23:59:59Z");
  const rootKey = newKey();
  const common = { notBefore, notAfter };
  const root = issue({
    cn: "Intel SGX Root CA",
    issuerCn: "Intel SGX Root CA",
    issuerKey: rootKey,
    key: rootKey,
    ca: true,
    ...common,
  });
  const platformCa = issue({
    cn: "Intel SGX PCK Platform CA",
    issuerCn: "Intel SGX Root CA",
    issuerKey: rootKey,
    key: newKey(),
    ca: true,
    ...common,
  });
  const pck = issue({
    cn: "Intel SGX PCK Certificate",
    issuerCn: "Intel SGX PCK Platform CA",
    issuerKey: platformCa.key,
    key: newKey(),
    ca: false,
    extra: [sgxExtension(options)],
    ...common,
  });
  const tcbSigning = issue({
    cn: "Intel SGX TCB Signing",
    issuerCn: "Intel SGX Root CA",
    issuerKey: rootKey,
    key: newKey(),
    ca: false,
    ...common,
  });
  return { root, platformCa, pck, tcbSigning, pckChainPem: pck.pem + platformCa.pem + root.pem };
}

/**
 * A self-signed certificate for `key` (P-256), e.g. a simulated TD's TLS certificate: the
 * quote, not a CA, vouches for such a key, so nothing needs to chain. Valid 2020 → 2049.
 */
export function createSelfSignedCertificate(key: KeyObject, commonName: string): TestCert {
  return issue({
    cn: commonName,
    issuerCn: commonName,
    issuerKey: key,
    key,
    ca: false,
    notBefore: new Date("2020-01-01T00:00:00Z"),
    notAfter: new Date("2049-12-31T23:59:59Z"),
  });
}

/** A DER CRL by `issuer` listing `revokedSerials` (hex), valid thisUpdate → nextUpdate. */
export function createTestCrl(
  issuerCn: string,
  issuerKey: KeyObject,
  thisUpdate: Date,
  nextUpdate: Date,
  revokedSerials: readonly string[] = [],
): Uint8Array {
  const fields: asn1js.AsnType[] = [
    int(1),
    ECDSA_SHA256(),
    name(issuerCn, TEST_ORG),
    time(thisUpdate),
    time(nextUpdate),
  ];
  if (revokedSerials.length > 0) {
    fields.push(
      seq(...revokedSerials.map((s) => seq(bigInt(Buffer.from(s, "hex")), time(thisUpdate)))),
    );
  }
  return signed(seq(...fields), issuerKey);
}

export interface TestCollateralOptions {
  pki: TestPki;
  issueDate: Date;
  nextUpdate: Date;
  /** Must equal the PCK's FMSPC for a match (default `00906ed50000`, the test PKI's default). */
  fmspc?: string;
  /** Status of the single platform TCB level (default UpToDate). */
  tcbStatus?: TcbStatus;
  advisoryIds?: string[];
  /** Minimum TEE_TCB_SVN[2..15] for the level (default all zero). */
  tdxComponents?: number[];
  /** Status of the QE identity's single level (default UpToDate). */
  qeTcbStatus?: TcbStatus;
  /** Status of the TDX module identities' single level (default UpToDate). */
  moduleTcbStatus?: TcbStatus;
  /** PCK serials (hex) to list in the PCK CRL. */
  revokedPckSerials?: string[];
}

/**
 * Signed collateral for a {@link TestPki}: one TCB level (all SVN minimums 0, so any
 * platform matches unless `tdxComponents` says otherwise), module identities TDX_01..TDX_03
 * and Intel's TD-QE identity with one level from ISVSVN 0 (UpToDate unless told), and CRLs.
 */
export function createTestCollateral(options: TestCollateralOptions): Collateral {
  const { pki, issueDate, nextUpdate } = options;
  const zeros16 = Array.from({ length: 16 }, () => ({ svn: 0 }));
  const tdx = Array.from({ length: 16 }, (_, i) => ({ svn: options.tdxComponents?.[i] ?? 0 }));
  const isvLevel = (tcbStatus: TcbStatus = "UpToDate"): Record<string, unknown> => ({
    tcb: { isvsvn: 0 },
    tcbDate: iso(issueDate),
    tcbStatus,
  });
  const level: Record<string, unknown> = {
    tcb: { sgxtcbcomponents: zeros16, pcesvn: 0, tdxtcbcomponents: tdx },
    tcbDate: iso(issueDate),
    tcbStatus: options.tcbStatus ?? "UpToDate",
  };
  if (options.advisoryIds) level["advisoryIDs"] = options.advisoryIds;
  const zeroSigner = "00".repeat(48);
  const tcbInfo = JSON.stringify({
    id: "TDX",
    version: 3,
    issueDate: iso(issueDate),
    nextUpdate: iso(nextUpdate),
    fmspc: (options.fmspc ?? "00906ed50000").toUpperCase(),
    pceId: "0000",
    tcbType: 0,
    tcbEvaluationDataNumber: 1,
    tdxModule: {
      mrsigner: zeroSigner,
      attributes: "0000000000000000",
      attributesMask: "FFFFFFFFFFFFFFFF",
    },
    tdxModuleIdentities: ["TDX_01", "TDX_02", "TDX_03"].map((id) => ({
      id,
      mrsigner: zeroSigner,
      attributes: "0000000000000000",
      attributesMask: "FFFFFFFFFFFFFFFF",
      tcbLevels: [isvLevel(options.moduleTcbStatus)],
    })),
    tcbLevels: [level],
  });
  const qeIdentity = JSON.stringify({
    id: "TD_QE",
    version: 2,
    issueDate: iso(issueDate),
    nextUpdate: iso(nextUpdate),
    tcbEvaluationDataNumber: 1,
    miscselect: "00000000",
    miscselectMask: "FFFFFFFF",
    attributes: "11000000000000000000000000000000",
    attributesMask: "FBFFFFFFFFFFFFFF0000000000000000",
    mrsigner: INTEL_TD_QE_MRSIGNER,
    isvprodid: 2,
    tcbLevels: [isvLevel(options.qeTcbStatus)],
  });
  const signText = (text: string): string =>
    sign("sha256", Buffer.from(text), {
      key: pki.tcbSigning.key,
      dsaEncoding: "ieee-p1363",
    }).toString("hex");
  const signingChain = pki.tcbSigning.pem + pki.root.pem;
  const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString("hex");
  return {
    pck_crl_issuer_chain: pki.platformCa.pem + pki.root.pem,
    root_ca_crl: hex(createTestCrl("Intel SGX Root CA", pki.root.key, issueDate, nextUpdate)),
    pck_crl: hex(
      createTestCrl(
        "Intel SGX PCK Platform CA",
        pki.platformCa.key,
        issueDate,
        nextUpdate,
        options.revokedPckSerials,
      ),
    ),
    tcb_info_issuer_chain: signingChain,
    tcb_info: tcbInfo,
    tcb_info_signature: signText(tcbInfo),
    qe_identity_issuer_chain: signingChain,
    qe_identity: qeIdentity,
    qe_identity_signature: signText(qeIdentity),
  };
}

function iso(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, "Z");
}
