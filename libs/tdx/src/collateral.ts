// Intel PCS collateral (TCB info, QE identity, CRLs) in the dcap-qvl `QuoteCollateralV3`
// JSON form, and the typed views of the signed TCB info / QE identity documents.
import {
  CollateralFormatError,
  asObject,
  date,
  hex,
  list,
  optionalStrings,
  str,
  uint,
  type JsonObject,
} from "./shape.ts";

/**
 * Verification collateral, in the JSON form of dcap-qvl's `QuoteCollateralV3`. Fetch it per
 * FMSPC from Intel PCS or a PCCS (see the README); `tcb_info` / `qe_identity` must be the
 * exact text that Intel signed, not a re-serialisation.
 */
export interface Collateral {
  /** PEM chain of the PCK CRL issuer (informational: the CRL is checked against the quote's own PCK issuer). */
  pck_crl_issuer_chain: string;
  /** Hex of the DER Intel SGX Root CA CRL. */
  root_ca_crl: string;
  /** Hex of the DER PCK CRL of the PCK's issuing CA (Platform or Processor). */
  pck_crl: string;
  /** PEM chain: Intel SGX TCB Signing, Intel SGX Root CA. */
  tcb_info_issuer_chain: string;
  /** Exact signed JSON text of the `tcbInfo` value. */
  tcb_info: string;
  /** Hex of the raw 64-byte r‖s signature over `tcb_info`. */
  tcb_info_signature: string;
  /** PEM chain: Intel SGX TCB Signing, Intel SGX Root CA. */
  qe_identity_issuer_chain: string;
  /** Exact signed JSON text of the `enclaveIdentity` value. */
  qe_identity: string;
  /** Hex of the raw 64-byte r‖s signature over `qe_identity`. */
  qe_identity_signature: string;
}

const COLLATERAL_KEYS = [
  "pck_crl_issuer_chain",
  "root_ca_crl",
  "pck_crl",
  "tcb_info_issuer_chain",
  "tcb_info",
  "tcb_info_signature",
  "qe_identity_issuer_chain",
  "qe_identity",
  "qe_identity_signature",
] as const satisfies readonly (keyof Collateral)[];

/** Checks that an untrusted value has the {@link Collateral} shape; throws {@link CollateralFormatError}. */
export function asCollateral(value: unknown): Collateral {
  const o = asObject(value, "collateral");
  for (const key of COLLATERAL_KEYS) str(o, key, "collateral");
  return o as unknown as Collateral;
}

/** TCB statuses Intel assigns to TCB levels, best first. */
export const TCB_STATUSES = [
  "UpToDate",
  "SWHardeningNeeded",
  "ConfigurationNeeded",
  "ConfigurationAndSWHardeningNeeded",
  "OutOfDate",
  "OutOfDateConfigurationNeeded",
  "Revoked",
] as const;
export type TcbStatus = (typeof TCB_STATUSES)[number];

function status(o: JsonObject, path: string): TcbStatus {
  const s = str(o, "tcbStatus", path);
  if (!(TCB_STATUSES as readonly string[]).includes(s)) {
    throw new CollateralFormatError(`${path}.tcbStatus "${s}" is not a known TCB status`);
  }
  return s as TcbStatus;
}

/** One platform TCB level of a TDX TCB info. */
export interface TcbLevel {
  sgxTcbComponents: number[];
  pcesvn: number;
  tdxTcbComponents: number[];
  tcbDate: string;
  tcbStatus: TcbStatus;
  advisoryIds: string[];
}

/** One ISVSVN-keyed level (TDX module identities, QE identity). */
export interface IsvTcbLevel {
  isvsvn: number;
  tcbDate: string;
  tcbStatus: TcbStatus;
  advisoryIds: string[];
}

export interface TdxModuleIdentity {
  id: string;
  mrsigner: string;
  attributes: string;
  attributesMask: string;
  tcbLevels: IsvTcbLevel[];
}

/** The signed `tcbInfo` document of a TDX platform (TCB info v3). */
export interface TcbInfo {
  id: string;
  version: number;
  issueDate: Date;
  nextUpdate: Date;
  fmspc: string;
  pceId: string;
  tdxModule: { mrsigner: string; attributes: string; attributesMask: string };
  tdxModuleIdentities: TdxModuleIdentity[];
  tcbLevels: TcbLevel[];
}

/** The signed `enclaveIdentity` document of the TD Quoting Enclave. */
export interface QeIdentity {
  id: string;
  version: number;
  issueDate: Date;
  nextUpdate: Date;
  miscselect: string;
  miscselectMask: string;
  attributes: string;
  attributesMask: string;
  mrsigner: string;
  isvprodid: number;
  tcbLevels: IsvTcbLevel[];
}

function parseJson(text: string, what: string): JsonObject {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new CollateralFormatError(`${what} is not JSON`);
  }
  return asObject(value, what);
}

function components(o: JsonObject, key: string, path: string): number[] {
  const items = list(o, key, path);
  if (items.length !== 16) throw new CollateralFormatError(`${path}.${key} must have 16 entries`);
  return items.map((c, i) =>
    uint(asObject(c, `${path}.${key}[${i}]`), "svn", `${path}.${key}[${i}]`),
  );
}

function isvLevels(o: JsonObject, path: string): IsvTcbLevel[] {
  return list(o, "tcbLevels", path).map((raw, i) => {
    const p = `${path}.tcbLevels[${i}]`;
    const level = asObject(raw, p);
    return {
      isvsvn: uint(asObject(level["tcb"], `${p}.tcb`), "isvsvn", `${p}.tcb`),
      tcbDate: str(level, "tcbDate", p),
      tcbStatus: status(level, p),
      advisoryIds: optionalStrings(level, "advisoryIDs", p),
    };
  });
}

/** Parses the signed TCB info text; throws {@link CollateralFormatError}. */
export function parseTcbInfo(text: string): TcbInfo {
  const p = "tcbInfo";
  const o = parseJson(text, p);
  const module = asObject(o["tdxModule"], `${p}.tdxModule`);
  const identities =
    o["tdxModuleIdentities"] === undefined ? [] : list(o, "tdxModuleIdentities", p);
  return {
    id: str(o, "id", p),
    version: uint(o, "version", p),
    issueDate: date(o, "issueDate", p),
    nextUpdate: date(o, "nextUpdate", p),
    fmspc: hex(o, "fmspc", p, 6),
    pceId: hex(o, "pceId", p, 2),
    tdxModule: {
      mrsigner: hex(module, "mrsigner", `${p}.tdxModule`, 48),
      attributes: hex(module, "attributes", `${p}.tdxModule`, 8),
      attributesMask: hex(module, "attributesMask", `${p}.tdxModule`, 8),
    },
    tdxModuleIdentities: identities.map((raw, i) => {
      const ip = `${p}.tdxModuleIdentities[${i}]`;
      const m = asObject(raw, ip);
      return {
        id: str(m, "id", ip),
        mrsigner: hex(m, "mrsigner", ip, 48),
        attributes: hex(m, "attributes", ip, 8),
        attributesMask: hex(m, "attributesMask", ip, 8),
        tcbLevels: isvLevels(m, ip),
      };
    }),
    tcbLevels: list(o, "tcbLevels", p).map((raw, i) => {
      const lp = `${p}.tcbLevels[${i}]`;
      const level = asObject(raw, lp);
      const tcb = asObject(level["tcb"], `${lp}.tcb`);
      return {
        sgxTcbComponents: components(tcb, "sgxtcbcomponents", `${lp}.tcb`),
        pcesvn: uint(tcb, "pcesvn", `${lp}.tcb`),
        tdxTcbComponents: components(tcb, "tdxtcbcomponents", `${lp}.tcb`),
        tcbDate: str(level, "tcbDate", lp),
        tcbStatus: status(level, lp),
        advisoryIds: optionalStrings(level, "advisoryIDs", lp),
      };
    }),
  };
}

/** Parses the signed QE identity text; throws {@link CollateralFormatError}. */
export function parseQeIdentity(text: string): QeIdentity {
  const p = "enclaveIdentity";
  const o = parseJson(text, p);
  return {
    id: str(o, "id", p),
    version: uint(o, "version", p),
    issueDate: date(o, "issueDate", p),
    nextUpdate: date(o, "nextUpdate", p),
    miscselect: hex(o, "miscselect", p, 4),
    miscselectMask: hex(o, "miscselectMask", p, 4),
    attributes: hex(o, "attributes", p, 16),
    attributesMask: hex(o, "attributesMask", p, 16),
    mrsigner: hex(o, "mrsigner", p, 32),
    isvprodid: uint(o, "isvprodid", p),
    tcbLevels: isvLevels(o, p),
  };
}

/**
 * Splits a raw Intel PCS response body (`{"tcbInfo":{…},"signature":"…"}` or
 * `{"enclaveIdentity":{…},"signature":"…"}`) into the exact signed text of `key`'s value and
 * the hex signature, ready for a {@link Collateral}. The signature covers the bytes as
 * served, so the value is cut out of the text rather than re-serialised.
 * Returns undefined when the text is not such a response.
 */
export function splitPcsResponse(
  text: string,
  key: "tcbInfo" | "enclaveIdentity",
): { body: string; signature: string } | undefined {
  let parsed: JsonObject;
  try {
    parsed = parseJson(text, "response");
  } catch {
    return undefined;
  }
  const signature = parsed["signature"];
  if (typeof signature !== "string") return undefined;
  const span = topLevelValueSpan(text, key);
  return span ? { body: text.slice(span[0], span[1]), signature } : undefined;
}

/** [start, end) of the object value of `key` in a top-level JSON object (text known valid). */
function topLevelValueSpan(text: string, key: string): [number, number] | undefined {
  let depth = 0;
  for (let i = 0; i < text.length;) {
    const ch = text[i];
    if (ch === '"') {
      const end = stringEnd(text, i);
      if (depth === 1 && JSON.parse(text.slice(i, end)) === key) {
        const colon = /^\s*:\s*/.exec(text.slice(end));
        const start = end + (colon?.[0].length ?? 0);
        if (colon && text[start] === "{") {
          const stop = closingBrace(text, start);
          return stop === undefined ? undefined : [start, stop];
        }
      }
      i = end;
      continue;
    }
    if (ch === "{" || ch === "[") depth++;
    else if (ch === "}" || ch === "]") depth--;
    i++;
  }
  return undefined;
}

/** Index just past the brace closing the object that opens at `start`. */
function closingBrace(text: string, start: number): number | undefined {
  let depth = 0;
  for (let i = start; i < text.length;) {
    const ch = text[i];
    if (ch === '"') {
      i = stringEnd(text, i);
      continue;
    }
    if (ch === "{" || ch === "[") depth++;
    else if (ch === "}" || ch === "]") {
      depth--;
      if (depth === 0) return i + 1;
    }
    i++;
  }
  return undefined;
}

/** Index just past the closing quote of the JSON string starting at `start`. */
function stringEnd(text: string, start: number): number {
  let i = start + 1;
  while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
  return i + 1;
}
