// TEST ONLY, for the Python SDK's tests: TDX quotes from the repository's synthetic test PKI
// (`@zml/tdx/testing`), bound with `reportDataFor` exactly as a tier-4 node binds a session.
// One JSON request per stdin line, one JSON answer per stdout line; ends at EOF. Request
// fields (all optional): pki ("main" | "other" | "expired"), nonce, tls_key_sha256,
// session_public_key (base64 SPKI DER; default: a fresh X25519 key), mrtd, rtmr0..rtmr3,
// debug, report_data (overrides the binding). Run from the repository root:
//   node libs/python-sdk/tests/make_test_quote.ts
import { createHash, generateKeyPairSync, randomBytes } from "node:crypto";
import { createInterface } from "node:readline";
import { reportDataFor } from "@zml/tdx";
import { buildTestQuoteV4, createTestPki } from "@zml/tdx/testing";
import type { TestPki } from "@zml/tdx/testing";

interface QuoteRequest {
  pki?: "main" | "other" | "expired";
  nonce?: string;
  tls_key_sha256?: string;
  session_public_key?: string;
  mrtd?: string;
  rtmr0?: string;
  rtmr1?: string;
  rtmr2?: string;
  rtmr3?: string;
  debug?: boolean;
  report_data?: string;
}

const pkis = new Map<string, TestPki>();

function pkiFor(name: string): TestPki {
  let pki = pkis.get(name);
  if (pki === undefined) {
    pki =
      name === "expired"
        ? createTestPki({
            notBefore: new Date("2020-01-01T00:00:00Z"),
            notAfter: new Date("2021-01-01T00:00:00Z"),
          })
        : createTestPki();
    pkis.set(name, pki);
  }
  return pki;
}

const hex = (bytes: number): string => randomBytes(bytes).toString("hex");

function make(request: QuoteRequest): Record<string, unknown> {
  const pki = pkiFor(request.pki ?? "main");
  const nonce = request.nonce ?? hex(32);
  const tlsKeySha256 = request.tls_key_sha256 ?? hex(32);
  const sessionPublicKey =
    request.session_public_key ??
    generateKeyPairSync("x25519")
      .publicKey.export({ type: "spki", format: "der" })
      .toString("base64");
  const sessionKeySha256 = createHash("sha256")
    .update(Buffer.from(sessionPublicKey, "base64"))
    .digest("hex");
  const measurement = {
    mrtd: request.mrtd ?? "a1".repeat(48),
    rtmr0: request.rtmr0 ?? "b0".repeat(48),
    rtmr1: request.rtmr1 ?? "b1".repeat(48),
    rtmr2: request.rtmr2 ?? "b2".repeat(48),
    rtmr3: request.rtmr3 ?? "b3".repeat(48),
  };
  const reportData =
    request.report_data ?? reportDataFor({ nonce, tlsKeySha256, sessionKeySha256 });
  const quote = buildTestQuoteV4({
    ...measurement,
    reportData,
    debug: request.debug === true,
    pckChainPem: pki.pckChainPem,
    pckKey: pki.pck.key,
  });
  return {
    quote_b64: Buffer.from(quote).toString("base64"),
    root_pem: pki.root.pem,
    nonce,
    tls_key_sha256: tlsKeySha256,
    session_public_key: sessionPublicKey,
    session_key_sha256: sessionKeySha256,
    report_data: reportData,
    ...measurement,
  };
}

for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === "") continue;
  let answer: Record<string, unknown>;
  try {
    answer = make(JSON.parse(line) as QuoteRequest);
  } catch (error) {
    answer = { error: String(error) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
