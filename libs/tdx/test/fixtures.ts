// Loads the real quotes in ./fixtures (sources and licenses in fixtures/README.md). The JSON
// files carry a `.txt` suffix so formatters never touch their signed bytes.
import { readFileSync } from "node:fs";
import type { Collateral } from "../src/index.ts";

export function fixture(name: string): Uint8Array {
  return new Uint8Array(readFileSync(new URL(`./fixtures/${name}`, import.meta.url)));
}

export function fixtureText(name: string): string {
  return readFileSync(new URL(`./fixtures/${name}`, import.meta.url), "utf8");
}

export function collateral(name: string): Collateral {
  return JSON.parse(fixtureText(`${name}.collateral.json.txt`)) as Collateral;
}

export interface ExpectedPck {
  serial: string;
  issuer: string;
  notBefore: string;
  notAfter: string;
  fmspc: string;
  pceId: string;
  pceSvn: number;
  cpuSvn: string;
  ppid: string;
}

export interface ExpectedParsed {
  decodedBytes: number;
  version: number;
  attKeyType: number;
  teeType: string;
  qeVendorId: string;
  userData: string;
  bodyType: number;
  bodySize: number;
  bodyOffset: number;
  sigDataLenOffset: number;
  sigDataLen: number;
  sigDataEnd: number;
  trailingBytesAfterSigData: number;
  qeReportOffset: number;
  qeAuthDataLen: number;
  innerCertSize: number;
  teeTcbSvn: string;
  mrSeam: string;
  mrSignerSeam: string;
  seamAttributes: string;
  tdAttributes: string;
  xfam: string;
  mrTd: string;
  mrConfigId: string;
  mrOwner: string;
  mrOwnerConfig: string;
  rtmr0: string;
  rtmr1: string;
  rtmr2: string;
  rtmr3: string;
  reportData: string;
  teeTcbSvn2?: string;
  mrServiceTd?: string;
  qeReport: {
    mrSigner: string;
    mrEnclave: string;
    isvProdId: number;
    isvSvn: number;
    attributes: string;
    miscSelect: number;
    reportData: string;
  };
  attestationKey: string;
  pck: ExpectedPck;
}

export interface ExpectedQuote {
  parsed: ExpectedParsed;
  expect: { fullCollateralWindow?: [string, string] };
  negativeMutations?: { cases: { offset: number; value: number; reason: string }[] };
}

interface ExpectedFile {
  quotes: Record<string, ExpectedQuote>;
}

export const expected = JSON.parse(fixtureText("expected.json.txt")) as ExpectedFile;

export const QUOTE_FILES = [
  "v4-dcap-qvl-phala.bin",
  "v4-go-tdx-guest-spr.bin",
  "v5-go-tdx-guest.bin",
  "v4-trustee-debug.bin",
] as const;

export function expectedFor(file: string): ExpectedQuote {
  const entry = expected.quotes[file];
  if (!entry) throw new Error(`no expected values for ${file}`);
  return entry;
}

/** Byte offset where the PEM chain starts (after QE report, signature, auth data, inner header). */
export function pemOffset(parsed: ExpectedParsed): number {
  return parsed.qeReportOffset + 384 + 64 + 2 + parsed.qeAuthDataLen + 6;
}
