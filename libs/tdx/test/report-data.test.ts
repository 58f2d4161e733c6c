import { createHash, createPublicKey, generateKeyPairSync } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  certificateKeySha256,
  REPORT_DATA_DOMAIN,
  reportDataFor,
  spkiSha256,
} from "../src/index.ts";
import {
  buildTestQuoteV4,
  createSelfSignedCertificate,
  createTestPki,
} from "../src/testing/index.ts";
import { runCommand } from "./run-command.ts";

const nonce = "ab".repeat(32);
const tlsKey = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
const tlsKeySha256 = spkiSha256(tlsKey);
const sessionDer = generateKeyPairSync("x25519").publicKey.export({ type: "spki", format: "der" });

describe("reportDataFor", () => {
  it("is the nonce, then SHA-256 of the domain, a zero byte and both key hashes", () => {
    const session = spkiSha256(sessionDer);
    const keys = createHash("sha256")
      .update(
        Buffer.concat([
          Buffer.from(REPORT_DATA_DOMAIN),
          Buffer.of(0),
          Buffer.from(tlsKeySha256, "hex"),
          Buffer.from(session, "hex"),
        ]),
      )
      .digest("hex");
    expect(reportDataFor({ nonce, tlsKeySha256, sessionKeySha256: session })).toBe(nonce + keys);
  });

  it("takes 32 zero bytes for a missing session key, so the three cases differ", () => {
    const none = reportDataFor({ nonce, tlsKeySha256 });
    expect(reportDataFor({ nonce, tlsKeySha256, sessionKeySha256: "00".repeat(32) })).toBe(none);
    expect(
      reportDataFor({ nonce, tlsKeySha256, sessionKeySha256: spkiSha256(sessionDer) }),
    ).not.toBe(none);
    const other = spkiSha256(generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey);
    expect(reportDataFor({ nonce, tlsKeySha256: other })).not.toBe(none);
    expect(none).toMatch(/^[0-9a-f]{128}$/);
  });

  it("rejects values that are not 32 bytes of hex", () => {
    expect(() => reportDataFor({ nonce: "ab", tlsKeySha256 })).toThrow(/nonce/);
    expect(() => reportDataFor({ nonce, tlsKeySha256: "zz".repeat(32) })).toThrow(/tlsKeySha256/);
    expect(() => reportDataFor({ nonce, tlsKeySha256, sessionKeySha256: "00" })).toThrow(
      /sessionKeySha256/,
    );
  });

  it("hashes a certificate's key as it hashes the key itself", () => {
    const cert = createSelfSignedCertificate(tlsKey, "tee-node");
    expect(certificateKeySha256(cert.pem)).toBe(tlsKeySha256);
    expect(spkiSha256(createPublicKey(tlsKey).export({ type: "spki", format: "der" }))).toBe(
      tlsKeySha256,
    );
  });
});

describe("zml verify-quote with a channel binding", () => {
  const pki = createTestPki();
  const cert = createSelfSignedCertificate(tlsKey, "tee-node");
  const sessionB64 = sessionDer.toString("base64");
  const quoteFor = (reportData: string) =>
    buildTestQuoteV4({
      mrtd: "a1".repeat(48),
      reportData,
      pckChainPem: pki.pckChainPem,
      pckKey: pki.pck.key,
    });
  const files: Record<string, Uint8Array> = {
    "bound.bin": quoteFor(reportDataFor({ nonce, tlsKeySha256 })),
    "session.bin": quoteFor(
      reportDataFor({ nonce, tlsKeySha256, sessionKeySha256: spkiSha256(sessionDer) }),
    ),
    "root.pem": Buffer.from(pki.root.pem),
    "tls.pem": Buffer.from(cert.pem),
  };
  const run = (argv: string[]) => runCommand(files, argv);
  const base = ["--root", "root.pem", "--nonce", nonce];

  it("verifies a quote bound to the nonce and the TLS key, given as a hash or a certificate", () => {
    expect(run(["bound.bin", ...base, "--tls-key-sha256", tlsKeySha256]).code).toBe(0);
    const viaCert = run(["bound.bin", ...base, "--tls-cert", "tls.pem"]);
    expect(viaCert.code, viaCert.stdout).toBe(0);
    expect(viaCert.stdout).toMatch(/✓ report_data/);
  });

  it("fails a quote bound to another TLS key, another nonce or without the session key", () => {
    const otherKey = spkiSha256(generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey);
    const wrongKey = run(["bound.bin", ...base, "--tls-key-sha256", otherKey]);
    expect(wrongKey.code).toBe(1);
    expect(wrongKey.stdout).toMatch(/✗ report_data/);
    const wrongNonce = ["--root", "root.pem", "--nonce", "cd".repeat(32), "--tls-cert", "tls.pem"];
    expect(run(["bound.bin", ...wrongNonce]).code).toBe(1);
    expect(run(["session.bin", ...base, "--tls-cert", "tls.pem"]).code).toBe(1);
    const withSession = run([
      "session.bin",
      ...base,
      "--tls-cert",
      "tls.pem",
      "--session-key",
      sessionB64,
    ]);
    expect(withSession.code, withSession.stdout).toBe(0);
  });

  it("answers a usage error for incomplete or malformed binding flags", () => {
    expect(run(["bound.bin", "--root", "root.pem", "--tls-cert", "tls.pem"]).stderr).toMatch(
      /need --nonce/,
    );
    expect(run(["bound.bin", ...base]).code).toBe(2);
    expect(
      run(["bound.bin", "--root", "root.pem", "--nonce", "ab", "--tls-cert", "tls.pem"]).code,
    ).toBe(2);
    expect(
      run(["bound.bin", ...base, "--tls-cert", "root.pem", "--tls-key-sha256", tlsKeySha256]).code,
    ).toBe(2);
    expect(
      run(["bound.bin", ...base, "--tls-key-sha256", tlsKeySha256, "--session-key", "!!"]).code,
    ).toBe(2);
  });
});
