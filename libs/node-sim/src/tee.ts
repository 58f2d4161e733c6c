// Tier 3/4 mode: answers quote requests like a TD's attestation agent would, with quotes in
// the real v4 layout signed through a test PCK chain.
import { generateKeyPairSync } from "node:crypto";
import { NonceHexSchema } from "@zml/contracts";
import type { NodeQuoteResponse } from "@zml/contracts";
import { reportDataFor, spkiSha256 } from "@zml/tdx";
import { buildTestQuoteV4 } from "@zml/tdx/testing";
import type { SimTeeOptions } from "./types.ts";
import { SimInputError } from "./validate.ts";

const MEASUREMENTS = ["mrtd", "rtmr0", "rtmr1", "rtmr2", "rtmr3"] as const;

/** Throws {@link SimInputError} (`invalid_options`, `options.tee.*`) for bad TEE options. */
export function checkTeeOptions(tee: SimTeeOptions): void {
  const fail = (field: string, message: string): never => {
    throw new SimInputError(
      "invalid_options",
      `options.tee.${field}: ${message}`,
      `options.tee.${field}`,
    );
  };
  if (typeof tee.signer?.pckChainPem !== "string" || !tee.signer.pckChainPem.includes("BEGIN")) {
    fail("signer.pckChainPem", "expected a PEM certificate chain");
  }
  if (tee.signer.pckKey?.type !== "private") fail("signer.pckKey", "expected a private key");
  for (const field of MEASUREMENTS) {
    const value = tee[field];
    if (field !== "mrtd" && value === undefined) continue;
    if (typeof value !== "string" || !/^[0-9a-fA-F]{96}$/.test(value)) {
      fail(field, "expected 48 bytes of hex");
    }
  }
}

/**
 * Signs test quotes for given REPORTDATA with a simulated TD's measurements, through the test
 * PCK chain (never Intel's): the simulator's quoting, also what the TD proxy uses where there
 * is no TDX guest (`libs/td-proxy`).
 */
export type ReportDataQuoter = (reportDataHex: string) => NodeQuoteResponse;

export function createReportDataQuoter(tee: SimTeeOptions): ReportDataQuoter {
  checkTeeOptions(tee);
  const attestationKey =
    tee.signer.attestationKey ?? generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
  const measurements: Record<string, string> = {};
  for (const field of MEASUREMENTS) {
    const value = tee[field];
    if (value !== undefined) measurements[field] = value.toLowerCase();
  }
  return (reportData) => {
    const quote = buildTestQuoteV4({
      mrtd: measurements["mrtd"] ?? "",
      ...measurements,
      reportData,
      debug: tee.debug === true,
      attestationKey,
      pckChainPem: tee.signer.pckChainPem,
      pckKey: tee.signer.pckKey,
    });
    const answer: NodeQuoteResponse = { quote_b64: Buffer.from(quote).toString("base64") };
    if (tee.collateral) answer.collateral = { ...tee.collateral };
    return answer;
  };
}

/** A TEE node's quote source: one quote per nonce, or the first one forever when replaying. */
export interface TeeQuoter {
  /**
   * A quote for the nonce whose REPORTDATA binds the TD's TLS key (`tlsKeySha256`). With
   * `sessionKey`, a fresh ephemeral X25519 key pair is made and its public key (SPKI DER,
   * base64) is served with the quote and bound too; the private key is dropped: a simulated
   * node opens no sealed requests (the TD proxy in front of one does, `libs/td-proxy`).
   */
  quote(
    nonceHex: string,
    options: { tlsKeySha256: string; sessionKey?: boolean },
  ): NodeQuoteResponse;
  readonly served: number;
}

/** A fresh X25519 public key as SPKI DER. */
function ephemeralSessionKey(): Buffer {
  return generateKeyPairSync("x25519").publicKey.export({ type: "spki", format: "der" });
}

export function createTeeQuoter(tee: SimTeeOptions): TeeQuoter {
  const quoteFor = createReportDataQuoter(tee);
  let first: NodeQuoteResponse | undefined;
  let served = 0;
  return {
    quote(nonceHex, options) {
      served += 1;
      if (tee.replayQuote && first) return first;
      const sessionKey = options.sessionKey === true ? ephemeralSessionKey() : undefined;
      const answer = quoteFor(
        reportDataFor({
          nonce: nonceHex,
          tlsKeySha256: options.tlsKeySha256,
          sessionKeySha256: sessionKey && spkiSha256(sessionKey),
        }),
      );
      if (sessionKey) answer.session_public_key = sessionKey.toString("base64");
      first ??= answer;
      return answer;
    },
    get served() {
      return served;
    },
  };
}

/** The nonce of a quote request's query string, or undefined when missing or malformed. */
export function nonceOf(url: string): string | undefined {
  const nonce = new URL(url, "http://sim").searchParams.get("nonce")?.toLowerCase();
  return NonceHexSchema.safeParse(nonce).success ? nonce : undefined;
}

/** Whether a quote request asks for a session key (`session_key=1` or `true`). */
export function wantsSessionKey(url: string): boolean {
  const value = new URL(url, "http://sim").searchParams.get("session_key");
  return value === "1" || value === "true";
}
