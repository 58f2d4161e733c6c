// TDX quote v4/v5 layout (Intel "TDX DCAP Quoting Library API", appendix A.3). All integers
// are little-endian; measurement fields are raw bytes printed as hex in byte order.
import { ByteReader, toHex } from "./bytes.ts";
import { QuoteParseError } from "./errors.ts";
import { decodeQuoteInput } from "./input.ts";

/** ECDSA-256-with-P-256, the only attestation key type Intel's QE and verifiers support. */
export const ATT_KEY_TYPE_ECDSA_P256 = 2;
/** `tee_type` of a TDX quote (SGX is 0). */
export const TEE_TYPE_TDX = 0x81;
/** Intel's QE vendor id. */
export const INTEL_QE_VENDOR_ID = "939a7233f79c4ca9940a0db3957f0607";

const HEADER_SIZE = 48;
const V5_DESCRIPTOR_SIZE = 6;
const TD_REPORT_10_SIZE = 584;
const TD_REPORT_15_SIZE = 648;
const QE_REPORT_SIZE = 384;
const CERT_DATA_QE_REPORT = 6;
const CERT_DATA_PCK_CHAIN = 5;

/** The 48-byte quote header. */
export interface QuoteHeader {
  version: 4 | 5;
  att_key_type: number;
  tee_type: number;
  /** 16 bytes, hex; Intel's QE is {@link INTEL_QE_VENDOR_ID}. */
  qe_vendor_id: string;
  /** 20 bytes, hex; the first 16 are the platform's QE-ID. */
  user_data: string;
}

/** TD report body (TD report 1.0; the two last fields only in TD report 1.5). Hex strings. */
export interface TdReportBody {
  tee_tcb_svn: string;
  mrseam: string;
  mrsignerseam: string;
  seam_attributes: string;
  /** u64 little-endian as 8 bytes of hex; bit 0 (first byte & 0x01) is DEBUG. */
  td_attributes: string;
  xfam: string;
  mrtd: string;
  mrconfigid: string;
  mrowner: string;
  mrownerconfig: string;
  rtmr0: string;
  rtmr1: string;
  rtmr2: string;
  rtmr3: string;
  reportdata: string;
  /** TD report 1.5 only; null in a TD report 1.0 body. */
  tee_tcb_svn_2: string | null;
  /** TD report 1.5 only; null in a TD report 1.0 body. */
  mrservicetd: string | null;
}

/** SGX report body of the TD Quoting Enclave. Hex strings except the integers. */
export interface QeReport {
  cpusvn: string;
  miscselect: number;
  attributes: string;
  mrenclave: string;
  mrsigner: string;
  isvprodid: number;
  isvsvn: number;
  reportdata: string;
}

/** A parsed TDX quote. Byte fields are copies; nothing aliases the caller's input. */
export interface TdxQuote {
  header: QuoteHeader;
  /** 2 = TD report 1.0 (584 bytes), 3 = TD report 1.5 (648 bytes). v4 quotes are always 2. */
  bodyType: 2 | 3;
  bodyOffset: number;
  body: TdReportBody;
  /** The quote up to the end of its signature data (trailing bytes dropped). */
  bytes: Uint8Array;
  /** Header (+ v5 descriptor) + body: what the attestation key signs. */
  signedRegion: Uint8Array;
  /** ECDSA P-256 raw r‖s over SHA-256(signedRegion). */
  signature: Uint8Array;
  /** Raw P-256 public key x‖y (64 bytes). */
  attestationKey: Uint8Array;
  qeReportBytes: Uint8Array;
  qeReport: QeReport;
  /** ECDSA P-256 raw r‖s over SHA-256(qeReportBytes), by the PCK key. */
  qeReportSignature: Uint8Array;
  qeAuthData: Uint8Array;
  /** The PEM blocks of the certification data, in quote order (leaf first). */
  pckCertChainPem: string[];
  /** Bytes after the signature data, ignored (real quotes arrive padded). */
  trailingBytes: number;
}

/**
 * Parses a TDX quote v4 or v5 from raw bytes, hex or base64. Enforces the format selectors
 * (version, ECDSA P-256 key, TDX tee type, certification data types 6 and 5) and that every
 * size field agrees with the data; bytes after the signature data are ignored.
 * Never reads out of bounds and never throws anything but {@link QuoteParseError}.
 */
export function parseQuote(input: Uint8Array | string): TdxQuote {
  try {
    return parseBytes(decodeQuoteInput(input));
  } catch (err) {
    if (err instanceof QuoteParseError) throw err;
    // A defect here must still surface as a parse error: callers treat quotes as untrusted.
    throw new QuoteParseError("quote", null, `unexpected parser failure: ${String(err)}`);
  }
}

function parseBytes(bytes: Uint8Array): TdxQuote {
  const r = new ByteReader(bytes);
  r.need("header", 0, HEADER_SIZE);
  const version = r.u16("version", 0);
  if (version !== 4 && version !== 5) {
    throw new QuoteParseError("version", 0, `unsupported quote version ${version} (need 4 or 5)`);
  }
  const attKeyType = r.u16("att_key_type", 2);
  if (attKeyType !== ATT_KEY_TYPE_ECDSA_P256) {
    throw new QuoteParseError("att_key_type", 2, `unsupported key type ${attKeyType} (need 2)`);
  }
  const teeType = r.u32("tee_type", 4);
  if (teeType !== TEE_TYPE_TDX) {
    throw new QuoteParseError("tee_type", 4, `0x${teeType.toString(16)} is not TDX (0x81)`);
  }
  const header: QuoteHeader = {
    version,
    att_key_type: attKeyType,
    tee_type: teeType,
    qe_vendor_id: toHex(r.slice("qe_vendor_id", 12, 16)),
    user_data: toHex(r.slice("user_data", 28, 20)),
  };

  let bodyType: 2 | 3 = 2;
  let bodyOffset = HEADER_SIZE;
  let bodySize = TD_REPORT_10_SIZE;
  if (version === 5) {
    const type = r.u16("body_type", 48);
    const size = r.u32("body_size", 50);
    if (type !== 2 && type !== 3) {
      throw new QuoteParseError("body_type", 48, `body type ${type} is not a TD report (2 or 3)`);
    }
    const expected = type === 2 ? TD_REPORT_10_SIZE : TD_REPORT_15_SIZE;
    if (size !== expected) {
      throw new QuoteParseError(
        "body_size",
        50,
        `${size} for body type ${type} (need ${expected})`,
      );
    }
    bodyType = type;
    bodyOffset = HEADER_SIZE + V5_DESCRIPTOR_SIZE;
    bodySize = size;
  }
  r.need("body", bodyOffset, bodySize);
  const body = parseBody(r, bodyOffset, bodyType);

  const sigStart = bodyOffset + bodySize;
  const sigDataLen = r.u32("sig_data_len", sigStart);
  const sigData = sigStart + 4;
  r.need("signature_data", sigData, sigDataLen);
  const sigEnd = sigData + sigDataLen;

  const signature = r.slice("signature", sigData, 64);
  const attestationKey = r.slice("attestation_key", sigData + 64, 64);
  const certType = r.u16("cert_data_type", sigData + 128);
  if (certType !== CERT_DATA_QE_REPORT) {
    throw new QuoteParseError("cert_data_type", sigData + 128, `${certType} (need 6)`);
  }
  const certSize = r.u32("cert_data_size", sigData + 130);
  const cert = sigData + 134;
  if (134 + certSize !== sigDataLen) {
    throw new QuoteParseError(
      "cert_data_size",
      sigData + 130,
      `${certSize} disagrees with sig_data_len ${sigDataLen} (expected ${sigDataLen - 134})`,
    );
  }

  const qeReportBytes = r.slice("qe_report", cert, QE_REPORT_SIZE);
  const qeReportSignature = r.slice("qe_report_signature", cert + 384, 64);
  const authLen = r.u16("qe_auth_data_len", cert + 448);
  const qeAuthData = r.slice("qe_auth_data", cert + 450, authLen);
  const innerTypeAt = cert + 450 + authLen;
  const innerType = r.u16("pck_cert_data_type", innerTypeAt);
  if (innerType !== CERT_DATA_PCK_CHAIN) {
    throw new QuoteParseError(
      "pck_cert_data_type",
      innerTypeAt,
      `${innerType} (need 5, PEM chain)`,
    );
  }
  const pemSize = r.u32("pck_cert_data_size", innerTypeAt + 2);
  const pemAt = innerTypeAt + 6;
  if (pemAt + pemSize !== cert + certSize) {
    throw new QuoteParseError(
      "pck_cert_data_size",
      innerTypeAt + 2,
      `${pemSize} disagrees with cert_data_size ${certSize}`,
    );
  }
  const pemText = Buffer.from(r.slice("pck_cert_chain", pemAt, pemSize)).toString("latin1");

  const quoteBytes = bytes.slice(0, sigEnd);
  return {
    header,
    bodyType,
    bodyOffset,
    body,
    bytes: quoteBytes,
    signedRegion: quoteBytes.slice(0, sigStart),
    signature,
    attestationKey,
    qeReportBytes,
    qeReport: parseQeReport(qeReportBytes),
    qeReportSignature,
    qeAuthData,
    pckCertChainPem: extractPemCertificates(pemText),
    trailingBytes: bytes.length - sigEnd,
  };
}

function parseBody(r: ByteReader, at: number, bodyType: 2 | 3): TdReportBody {
  const hex = (field: string, off: number, size: number): string =>
    toHex(r.slice(field, at + off, size));
  return {
    tee_tcb_svn: hex("tee_tcb_svn", 0, 16),
    mrseam: hex("mrseam", 16, 48),
    mrsignerseam: hex("mrsignerseam", 64, 48),
    seam_attributes: hex("seam_attributes", 112, 8),
    td_attributes: hex("td_attributes", 120, 8),
    xfam: hex("xfam", 128, 8),
    mrtd: hex("mrtd", 136, 48),
    mrconfigid: hex("mrconfigid", 184, 48),
    mrowner: hex("mrowner", 232, 48),
    mrownerconfig: hex("mrownerconfig", 280, 48),
    rtmr0: hex("rtmr0", 328, 48),
    rtmr1: hex("rtmr1", 376, 48),
    rtmr2: hex("rtmr2", 424, 48),
    rtmr3: hex("rtmr3", 472, 48),
    reportdata: hex("reportdata", 520, 64),
    tee_tcb_svn_2: bodyType === 3 ? hex("tee_tcb_svn_2", 584, 16) : null,
    mrservicetd: bodyType === 3 ? hex("mrservicetd", 600, 48) : null,
  };
}

function parseQeReport(report: Uint8Array): QeReport {
  const view = new DataView(report.buffer, report.byteOffset, report.byteLength);
  return {
    cpusvn: toHex(report.subarray(0, 16)),
    miscselect: view.getUint32(16, true),
    attributes: toHex(report.subarray(48, 64)),
    mrenclave: toHex(report.subarray(64, 96)),
    mrsigner: toHex(report.subarray(128, 160)),
    isvprodid: view.getUint16(256, true),
    isvsvn: view.getUint16(258, true),
    reportdata: toHex(report.subarray(320, 384)),
  };
}

/** PEM certificate blocks in order; tolerates the NUL terminator real quotes carry. */
export function extractPemCertificates(text: string): string[] {
  return text.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
}
