import { generateKeyPairSync } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  INTEL_SGX_ROOT_CA_PEM,
  parseQuote,
  verifyQuote,
  type VerificationPolicy,
} from "../src/index.ts";
import {
  buildTestQuoteV4,
  createTestCollateral,
  createTestCrl,
  createTestPki,
  type TestCollateralOptions,
  type TestQuoteOptions,
} from "../src/testing/index.ts";

const pki = createTestPki({ fmspc: "30606a000000", pcesvn: 11 });
const issueDate = new Date("2025-01-01T00:00:00Z");
const nextUpdate = new Date("2025-02-01T00:00:00Z");
const at = new Date("2025-01-15T00:00:00Z");
const measurements = {
  mrtd: "a1".repeat(48),
  rtmr0: "b0".repeat(48),
  rtmr1: "b1".repeat(48),
  rtmr2: "b2".repeat(48),
  rtmr3: "b3".repeat(48),
  reportData: "cd".repeat(64),
};

function quote(extra: Partial<TestQuoteOptions> = {}): Uint8Array {
  return buildTestQuoteV4({
    ...measurements,
    pckChainPem: pki.pckChainPem,
    pckKey: pki.pck.key,
    ...extra,
  });
}

function collateral(extra: Partial<TestCollateralOptions> = {}) {
  return createTestCollateral({ pki, issueDate, nextUpdate, fmspc: "30606a000000", ...extra });
}

function run(q: Uint8Array, c = collateral(), policy?: VerificationPolicy, root = pki.root.pem) {
  return verifyQuote({ quote: q, collateral: c, at, trustedRootPem: root, policy });
}

const failed = (r: { checks: { name: string; ok: boolean }[] }): string[] =>
  r.checks.filter((c) => !c.ok).map((c) => c.name);

describe("buildTestQuoteV4 with a synthetic PKI", () => {
  it("builds a quote that passes every check against the test root", () => {
    const r = run(quote({ padding: 70 }), collateral(), {
      approvedMeasurements: [{ mrtd: measurements.mrtd, rtmr3: measurements.rtmr3 }],
      expectedReportData: measurements.reportData,
    });
    expect(failed(r)).toEqual([]);
    expect(r.tcbStatus).toBe("UpToDate");
    expect(r.fmspc).toBe("30606a000000");
    expect(r.pckSerial).toBe(pki.pck.serial);
    expect(r.expiresAt).toEqual(nextUpdate);
  });

  it("carries exactly the requested fields", () => {
    const q = parseQuote(
      quote({ mrconfigid: "0c".repeat(48), teeTcbSvn: "07020300000000000000000000000000" }),
    );
    expect(q.body).toMatchObject({
      mrtd: measurements.mrtd,
      rtmr0: measurements.rtmr0,
      rtmr3: measurements.rtmr3,
      reportdata: measurements.reportData,
      mrconfigid: "0c".repeat(48),
      tee_tcb_svn: "07020300000000000000000000000000",
      td_attributes: "0000001000000000",
    });
    expect(() => quote({ mrtd: "abc" })).toThrow(TypeError);
  });

  it("never verifies against Intel's root", () => {
    const r = run(quote(), collateral(), undefined, INTEL_SGX_ROOT_CA_PEM);
    expect(failed(r)).toContain("pck_chain");
  });

  it("fails when the QE report is signed by a key other than the PCK's", () => {
    const stranger = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
    expect(failed(run(quote({ pckKey: stranger })))).toEqual(["qe_report_signature"]);
  });

  it("rejects a debug TD", () => {
    expect(failed(run(quote({ debug: true })))).toEqual(["td_debug"]);
  });

  it("rejects expired certificates", () => {
    const old = createTestPki({ notAfter: new Date("2024-12-31T00:00:00Z") });
    const q = buildTestQuoteV4({
      ...measurements,
      pckChainPem: old.pckChainPem,
      pckKey: old.pck.key,
    });
    const r = verifyQuote({ quote: q, at, trustedRootPem: old.root.pem });
    expect(failed(r)).toEqual(["pck_chain_validity"]);
  });
});

describe("revocation and TCB status with synthetic collateral", () => {
  it("rejects a revoked PCK", () => {
    const r = run(quote(), collateral({ revokedPckSerials: ["00ff", pki.pck.serial] }));
    expect(failed(r)).toEqual(["pck_crl"]);
    expect(r.reason).toContain("is revoked");
  });

  it("rejects a revoked PCK Platform CA and a revoked TCB Signing certificate", () => {
    const c = collateral();
    c.root_ca_crl = Buffer.from(
      createTestCrl("Intel SGX Root CA", pki.root.key, issueDate, nextUpdate, [
        pki.platformCa.serial,
        pki.tcbSigning.serial,
      ]),
    ).toString("hex");
    expect(failed(run(quote(), c))).toEqual(
      expect.arrayContaining(["root_ca_crl", "tcb_info_signature", "qe_identity_signature"]),
    );
  });

  it("rejects a PCK CRL signed by the wrong CA", () => {
    const c = collateral();
    c.pck_crl = Buffer.from(
      createTestCrl("Intel SGX PCK Platform CA", pki.root.key, issueDate, nextUpdate),
    ).toString("hex");
    expect(failed(run(quote(), c))).toEqual(["pck_crl"]);
  });

  it("reports SWHardeningNeeded with advisories, accepted only when the policy lists it", () => {
    const c = collateral({ tcbStatus: "SWHardeningNeeded", advisoryIds: ["INTEL-SA-00615"] });
    const strict = run(quote(), c);
    expect(failed(strict)).toEqual(["tcb_status"]);
    expect(strict.tcbStatus).toBe("SWHardeningNeeded");
    expect(strict.advisoryIds).toEqual(["INTEL-SA-00615"]);
    const lenient = run(quote(), c, { acceptableTcbStatuses: ["UpToDate", "SWHardeningNeeded"] });
    expect(lenient.ok).toBe(true);
  });

  it("never accepts Revoked", () => {
    const r = run(quote(), collateral({ tcbStatus: "Revoked" }), {
      acceptableTcbStatuses: ["UpToDate", "Revoked"],
    });
    expect(r.tcbStatus).toBe("Revoked");
    expect(failed(r)).toEqual(["tcb_status"]);
  });

  it("finds no TCB level when a TDX component is below the minimum", () => {
    const c = collateral({ tdxComponents: [0, 0, 9] });
    const r = run(quote(), c);
    expect(failed(r)).toEqual(["tcb_level"]);
    expect(r.reason).toContain("no matching TCB level");
  });

  const merges: [Partial<TestCollateralOptions>, string][] = [
    [{ qeTcbStatus: "OutOfDate" }, "OutOfDate"],
    [{ tcbStatus: "SWHardeningNeeded", moduleTcbStatus: "OutOfDate" }, "OutOfDate"],
    [
      { tcbStatus: "ConfigurationNeeded", qeTcbStatus: "OutOfDate" },
      "OutOfDateConfigurationNeeded",
    ],
    [{ moduleTcbStatus: "Revoked" }, "Revoked"],
  ];
  for (const [options, merged] of merges) {
    it(`merges ${JSON.stringify(options)} into ${merged}`, () => {
      const r = run(quote(), collateral(options), { acceptableTcbStatuses: ["UpToDate"] });
      expect(r.tcbStatus).toBe(merged);
      expect(failed(r)).toEqual(["tcb_status"]);
    });
  }

  it("rejects an unknown TDX module version", () => {
    const r = run(quote({ teeTcbSvn: "06090300000000000000000000000000" }), collateral());
    expect(failed(r)).toEqual(["tdx_module"]);
    expect(r.reason).toContain("TDX_09");
  });

  it("rejects collateral for another FMSPC", () => {
    expect(failed(run(quote(), collateral({ fmspc: "00906ed50000" })))).toEqual(["tcb_info_match"]);
  });
});
