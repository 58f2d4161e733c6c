// Builds syntactically real, correctly signed TDX quotes v4 from a synthetic PKI, so a node
// simulator can attest with chosen measurements. Layout as in ../quote.ts.
import {
  createHash,
  createPublicKey,
  generateKeyPairSync,
  sign,
  type KeyObject,
} from "node:crypto";
import { INTEL_QE_VENDOR_ID } from "../quote.ts";

const INTEL_TD_QE_MRSIGNER = "dc9e2a7c6f948f17474e34a7fc43ed030f7c1563f1babddf6340c82e0e54a8c5";

/** Inputs of {@link buildTestQuoteV4}; hex for every byte field. */
export interface TestQuoteOptions {
  /** 48 bytes. */
  mrtd: string;
  /** 48 bytes each (default zero). */
  rtmr0?: string;
  rtmr1?: string;
  rtmr2?: string;
  rtmr3?: string;
  mrconfigid?: string;
  mrowner?: string;
  mrownerconfig?: string;
  /** 64 bytes (default zero): the nonce / key binding. */
  reportData?: string;
  /** Sets TD_ATTRIBUTES bit 0. */
  debug?: boolean;
  /** 8 bytes (default `0000001000000000`, SEPT_VE_DISABLE); `debug` is ORed in. */
  tdAttributes?: string;
  /** 8 bytes (default `e702060000000000`). */
  xfam?: string;
  /** 16 bytes (default `06010300000000000000000000000000`: module 1.x, ISVSVN 6). */
  teeTcbSvn?: string;
  /** 48 bytes (default zero). */
  mrseam?: string;
  /** QE ISVSVN (default 6). */
  qeSvn?: number;
  /** P-256 private key the "QE" signs the quote with (default: a fresh one). */
  attestationKey?: KeyObject;
  /** PEM chain PCK leaf, intermediate, root, e.g. `createTestPki().pckChainPem`. */
  pckChainPem: string;
  /** Private key of the PCK leaf. */
  pckKey: KeyObject;
  /** Zero bytes appended after the signature data, as real quotes often carry. */
  padding?: number;
}

function field(hex: string | undefined, size: number, what: string): Buffer {
  const bytes = Buffer.from(hex ?? "", "hex");
  if (hex === undefined) return Buffer.alloc(size);
  if (bytes.length !== size || bytes.toString("hex") !== hex.toLowerCase()) {
    throw new TypeError(`buildTestQuoteV4: ${what} must be ${size} bytes of hex`);
  }
  return bytes;
}

function rawPublicKey(key: KeyObject): Buffer {
  const jwk = createPublicKey(key).export({ format: "jwk" });
  return Buffer.concat([
    Buffer.from(jwk.x ?? "", "base64url"),
    Buffer.from(jwk.y ?? "", "base64url"),
  ]);
}

function u16(value: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(value);
  return b;
}

function u32(value: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(value);
  return b;
}

/**
 * A TDX quote v4 (TD report 1.0) whose every signature is valid under the given PCK chain:
 * the quote is signed by `attestationKey`, the QE report binds that key and is signed by
 * `pckKey`. The QE report claims Intel's TD-QE MRSIGNER. For tests and simulators only —
 * it verifies solely against the synthetic root, never against Intel's.
 */
export function buildTestQuoteV4(options: TestQuoteOptions): Uint8Array {
  const attestationKey =
    options.attestationKey ?? generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
  const tdAttributes = field(options.tdAttributes ?? "0000001000000000", 8, "tdAttributes");
  if (options.debug) tdAttributes[0] = tdAttributes[0]! | 0x01;

  const header = Buffer.concat([
    u16(4),
    u16(2),
    u32(0x81),
    Buffer.alloc(4),
    Buffer.from(INTEL_QE_VENDOR_ID, "hex"),
    Buffer.alloc(20),
  ]);
  const body = Buffer.concat([
    field(options.teeTcbSvn ?? "06010300000000000000000000000000", 16, "teeTcbSvn"),
    field(options.mrseam, 48, "mrseam"),
    Buffer.alloc(48), // MRSIGNERSEAM: zero for Intel-signed modules
    Buffer.alloc(8), // SEAMATTRIBUTES
    tdAttributes,
    field(options.xfam ?? "e702060000000000", 8, "xfam"),
    field(options.mrtd, 48, "mrtd"),
    field(options.mrconfigid, 48, "mrconfigid"),
    field(options.mrowner, 48, "mrowner"),
    field(options.mrownerconfig, 48, "mrownerconfig"),
    field(options.rtmr0, 48, "rtmr0"),
    field(options.rtmr1, 48, "rtmr1"),
    field(options.rtmr2, 48, "rtmr2"),
    field(options.rtmr3, 48, "rtmr3"),
    field(options.reportData, 64, "reportData"),
  ]);
  const signedRegion = Buffer.concat([header, body]);
  const signature = sign("sha256", signedRegion, {
    key: attestationKey,
    dsaEncoding: "ieee-p1363",
  });
  const akRaw = rawPublicKey(attestationKey);

  const authData = Buffer.from(Array.from({ length: 32 }, (_, i) => i));
  const qeReport = Buffer.alloc(384);
  qeReport.set(Buffer.from("1500000000000000e700000000000000", "hex"), 48);
  qeReport.set(Buffer.from(INTEL_TD_QE_MRSIGNER, "hex"), 128);
  qeReport.writeUInt16LE(2, 256);
  qeReport.writeUInt16LE(options.qeSvn ?? 6, 258);
  qeReport.set(createHash("sha256").update(akRaw).update(authData).digest(), 320);
  const qeSignature = sign("sha256", qeReport, { key: options.pckKey, dsaEncoding: "ieee-p1363" });

  const pem = Buffer.concat([Buffer.from(options.pckChainPem, "latin1"), Buffer.alloc(1)]);
  const certData = Buffer.concat([
    qeReport,
    qeSignature,
    u16(authData.length),
    authData,
    u16(5),
    u32(pem.length),
    pem,
  ]);
  const sigData = Buffer.concat([signature, akRaw, u16(6), u32(certData.length), certData]);
  return new Uint8Array(
    Buffer.concat([signedRegion, u32(sigData.length), sigData, Buffer.alloc(options.padding ?? 0)]),
  );
}
