// Minimal DER walks with asn1js for the two things node:crypto does not expose: CRLs and the
// Intel SGX extension of PCK certificates.
import * as asn1js from "asn1js";
import { toHex } from "./bytes.ts";

/** DER (a CRL or PCK certificate) without the expected structure; the verifier reports it as a failed check. */
export class DerError extends Error {
  readonly code = "der_error";
  constructor(message: string) {
    super(message);
    this.name = "DerError";
  }
}

const ECDSA_WITH_SHA256 = "1.2.840.10045.4.3.2";
const SGX_EXTENSION_OID = "1.2.840.113741.1.13.1";

function decode(der: Uint8Array, what: string): asn1js.AsnType {
  const parsed = asn1js.fromBER(der);
  if (parsed.offset === -1 || parsed.offset !== der.length) {
    throw new DerError(`${what}: not a single DER value`);
  }
  return parsed.result;
}

function children(node: asn1js.AsnType | undefined, what: string): asn1js.AsnType[] {
  if (node instanceof asn1js.Sequence || node instanceof asn1js.Constructed) {
    return node.valueBlock.value;
  }
  throw new DerError(`${what}: expected a SEQUENCE`);
}

function oidOf(node: asn1js.AsnType | undefined, what: string): string {
  if (node instanceof asn1js.ObjectIdentifier) return node.valueBlock.toString();
  throw new DerError(`${what}: expected an OBJECT IDENTIFIER`);
}

function timeOf(node: asn1js.AsnType | undefined): Date | undefined {
  if (node instanceof asn1js.UTCTime || node instanceof asn1js.GeneralizedTime) {
    return node.toDate();
  }
  return undefined;
}

function rawOf(node: asn1js.AsnType): Uint8Array {
  return new Uint8Array(node.valueBeforeDecodeView);
}

/** Upper-case hex without leading zero bytes, the form node:crypto prints serials in. */
export function normaliseSerial(hex: string): string {
  return hex.toUpperCase().replace(/^(?:00)+(?=.)/, "");
}

/** A parsed certificate revocation list. */
export interface Crl {
  /** DER of tbsCertList: what the issuer signed. */
  tbs: Uint8Array;
  /** DER ECDSA-Sig-Value. */
  signature: Uint8Array;
  thisUpdate: Date;
  nextUpdate: Date | null;
  /** Revoked serials as {@link normaliseSerial} hex. */
  revokedSerials: Set<string>;
}

/** Parses an ECDSA-SHA256-signed X.509 CRL; throws {@link DerError}. */
export function parseCrl(der: Uint8Array): Crl {
  const [tbsNode, algNode, sigNode] = children(decode(der, "CRL"), "CRL");
  if (!tbsNode || !algNode || !(sigNode instanceof asn1js.BitString)) {
    throw new DerError("CRL: expected tbsCertList, signatureAlgorithm, signature");
  }
  const alg = oidOf(children(algNode, "CRL signatureAlgorithm")[0], "CRL signatureAlgorithm");
  if (alg !== ECDSA_WITH_SHA256) throw new DerError(`CRL: signature algorithm ${alg} unsupported`);

  const tbs = children(tbsNode, "tbsCertList");
  let i = tbs[0] instanceof asn1js.Integer ? 1 : 0; // optional version
  i += 2; // signature algorithm, issuer
  const thisUpdate = timeOf(tbs[i]);
  if (!thisUpdate) throw new DerError("CRL: missing thisUpdate");
  i++;
  const nextUpdate = timeOf(tbs[i]) ?? null;
  if (nextUpdate) i++;
  const revokedSerials = new Set<string>();
  const list = tbs[i];
  if (list instanceof asn1js.Sequence) {
    for (const entry of list.valueBlock.value) {
      const serial = children(entry, "CRL entry")[0];
      if (!(serial instanceof asn1js.Integer)) throw new DerError("CRL entry: missing serial");
      revokedSerials.add(normaliseSerial(toHex(serial.valueBlock.valueHexView)));
    }
  }
  return {
    tbs: rawOf(tbsNode),
    signature: new Uint8Array(sigNode.valueBlock.valueHexView),
    thisUpdate,
    nextUpdate,
    revokedSerials,
  };
}

/** The Intel SGX extension (OID 1.2.840.113741.1.13.1) of a PCK certificate. */
export interface PckExtension {
  /** Hex, 16 bytes. */
  ppid: string;
  /** SGX TCB component SVNs 1..16 (index 0 = component 1). */
  sgxTcbComponents: number[];
  pcesvn: number;
  /** Hex, 16 bytes. */
  cpusvn: string;
  /** Hex, 2 bytes. */
  pceid: string;
  /** Hex, 6 bytes, lower case. */
  fmspc: string;
}

/** Extracts the SGX extension from a PCK certificate's DER; throws {@link DerError}. */
export function parsePckExtension(certDer: Uint8Array): PckExtension {
  const value = findExtension(certDer, SGX_EXTENSION_OID);
  if (!value) throw new DerError("PCK certificate has no SGX extension");
  const fields = sgxFields(decode(value, "SGX extension"), SGX_EXTENSION_OID);
  const tcb = fields.get(`${SGX_EXTENSION_OID}.2`);
  if (!tcb) throw new DerError("SGX extension: missing TCB");
  const tcbFields = sgxFields(tcb, `${SGX_EXTENSION_OID}.2`);
  const sgxTcbComponents: number[] = [];
  for (let c = 1; c <= 16; c++) {
    sgxTcbComponents.push(intField(tcbFields, `${SGX_EXTENSION_OID}.2.${c}`));
  }
  return {
    ppid: octetField(fields, `${SGX_EXTENSION_OID}.1`, 16),
    sgxTcbComponents,
    pcesvn: intField(tcbFields, `${SGX_EXTENSION_OID}.2.17`),
    cpusvn: octetField(tcbFields, `${SGX_EXTENSION_OID}.2.18`, 16),
    pceid: octetField(fields, `${SGX_EXTENSION_OID}.3`, 2),
    fmspc: octetField(fields, `${SGX_EXTENSION_OID}.4`, 6),
  };
}

function findExtension(certDer: Uint8Array, oid: string): Uint8Array | undefined {
  const tbs = children(
    children(decode(certDer, "certificate"), "certificate")[0],
    "tbsCertificate",
  );
  const wrapper = tbs.find((n) => n.idBlock.tagClass === 3 && n.idBlock.tagNumber === 3);
  if (!wrapper) return undefined;
  for (const ext of children(children(wrapper, "extensions")[0], "extensions")) {
    const parts = children(ext, "extension");
    if (oidOf(parts[0], "extension id") !== oid) continue;
    const octets = parts[parts.length - 1];
    if (!(octets instanceof asn1js.OctetString)) throw new DerError("extension: missing value");
    return new Uint8Array(octets.valueBlock.valueHexView);
  }
  return undefined;
}

/** SGX extension values are SEQUENCE OF SEQUENCE { OID, value }; keyed by OID. */
function sgxFields(node: asn1js.AsnType, what: string): Map<string, asn1js.AsnType> {
  const out = new Map<string, asn1js.AsnType>();
  for (const item of children(node, what)) {
    const [id, value] = children(item, what);
    if (value) out.set(oidOf(id, what), value);
  }
  return out;
}

function intField(fields: Map<string, asn1js.AsnType>, oid: string): number {
  const node = fields.get(oid);
  if (
    !(node instanceof asn1js.Integer) ||
    node.valueBlock.valueHexView.length > 4 ||
    node.valueBlock.valueDec < 0
  ) {
    throw new DerError(`SGX extension: ${oid} is not a small non-negative INTEGER`);
  }
  return node.valueBlock.valueDec;
}

function octetField(fields: Map<string, asn1js.AsnType>, oid: string, size: number): string {
  const node = fields.get(oid);
  if (!(node instanceof asn1js.OctetString) || node.valueBlock.valueHexView.length !== size) {
    throw new DerError(`SGX extension: ${oid} is not a ${size}-byte OCTET STRING`);
  }
  return toHex(node.valueBlock.valueHexView);
}
