import { describe, expect, it } from "vitest";
import {
  INTEL_SGX_ROOT_CA_PEM,
  parseQuote,
  splitPcsResponse,
  verifyQuote,
  type Collateral,
  type VerificationPolicy,
  type VerificationResult,
} from "../src/index.ts";
import { collateral, expectedFor, fixture, fixtureText, pemOffset } from "./fixtures.ts";

const PHALA = "v4-dcap-qvl-phala.bin";
const SPR = "v4-go-tdx-guest-spr.bin";
const V5 = "v5-go-tdx-guest.bin";
const DEBUG = "v4-trustee-debug.bin";

function verify(
  quote: Uint8Array | string,
  at: string,
  extra: { collateral?: Collateral; policy?: VerificationPolicy; root?: string } = {},
): VerificationResult {
  return verifyQuote({
    quote,
    at: new Date(at),
    trustedRootPem: extra.root ?? INTEL_SGX_ROOT_CA_PEM,
    collateral: extra.collateral,
    policy: extra.policy,
  });
}

function check(result: VerificationResult, name: string): { ok: boolean; detail: string } {
  const found = result.checks.find((c) => c.name === name);
  if (!found) throw new Error(`no check ${name} in ${result.checks.map((c) => c.name).join(",")}`);
  return found;
}

function failed(result: VerificationResult): string[] {
  return result.checks.filter((c) => !c.ok).map((c) => c.name);
}

describe("v4-dcap-qvl-phala: positive with full collateral", () => {
  const want = expectedFor(PHALA);
  const [from, to] = want.expect.fullCollateralWindow!;

  for (const at of [from, "2025-07-01T00:00:00Z", to]) {
    it(`verifies as UpToDate at ${at}`, () => {
      const r = verify(fixture(PHALA), at, { collateral: collateral("v4-dcap-qvl-phala") });
      expect(failed(r)).toEqual([]);
      expect(r.ok).toBe(true);
      expect(r.reason).toBeNull();
      expect(r.tcbStatus).toBe("UpToDate");
      expect(r.advisoryIds).toEqual([]);
      expect(r.fmspc).toBe(want.parsed.pck.fmspc);
      expect(r.pckSerial).toBe(want.parsed.pck.serial);
      expect(r.pck).toMatchObject({ pcesvn: 11, pceid: "0000", cpusvn: want.parsed.pck.cpuSvn });
      expect(r.fields).toMatchObject({
        version: 4,
        body_type: 2,
        mrtd: want.parsed.mrTd,
        rtmr0: want.parsed.rtmr0,
        rtmr1: want.parsed.rtmr1,
        rtmr2: want.parsed.rtmr2,
        rtmr3: want.parsed.rtmr3,
        reportdata: want.parsed.reportData,
        td_attributes: want.parsed.tdAttributes,
        xfam: want.parsed.xfam,
        tee_tcb_svn: want.parsed.teeTcbSvn,
        mrseam: want.parsed.mrSeam,
      });
      // The PCK CRL's nextUpdate is the first thing to lapse.
      expect(r.expiresAt?.toISOString()).toBe("2025-07-19T10:00:35.000Z");
      expect(check(r, "tdx_module").detail).toContain("TDX_01");
    });
  }

  it("fails as expired just before and just after the collateral window", () => {
    const before = verify(fixture(PHALA), "2025-06-19T10:32:26Z", {
      collateral: collateral("v4-dcap-qvl-phala"),
    });
    expect(before.ok).toBe(false);
    expect(failed(before)).toEqual(["qe_identity_freshness"]);
    const after = verify(fixture(PHALA), "2025-07-19T10:00:36Z", {
      collateral: collateral("v4-dcap-qvl-phala"),
    });
    expect(after.ok).toBe(false);
    expect(failed(after)).toEqual(["pck_crl"]);
    expect(after.reason).toMatch(/^pck_crl: expired/);
    const later = verify(fixture(PHALA), "2025-09-01T00:00:00Z", {
      collateral: collateral("v4-dcap-qvl-phala"),
    });
    expect(failed(later)).toEqual(
      expect.arrayContaining(["pck_crl", "tcb_info_freshness", "qe_identity_freshness"]),
    );
  });

  it("verifies without collateral but reports no TCB status", () => {
    const r = verify(fixture(PHALA), "2025-07-01T00:00:00Z");
    expect(r.ok).toBe(true);
    expect(r.tcbStatus).toBeNull();
    expect(r.checks.some((c) => c.name.startsWith("tcb_"))).toBe(false);
    expect(r.expiresAt?.toISOString()).toBe("2032-02-06T23:25:51.000Z");
  });

  it("fails closed without collateral when the policy requires it", () => {
    const r = verify(fixture(PHALA), "2025-07-01T00:00:00Z", {
      policy: { requireCollateral: true },
    });
    expect(r.ok).toBe(false);
    expect(failed(r)).toEqual(["collateral_required"]);
  });

  it("accepts hex and base64 input with the same result as binary", () => {
    const bytes = fixture(PHALA);
    const at = "2025-07-01T00:00:00Z";
    const c = collateral("v4-dcap-qvl-phala");
    const binary = verify(bytes, at, { collateral: c });
    expect(verify(Buffer.from(bytes).toString("hex"), at, { collateral: c })).toEqual(binary);
    expect(verify(Buffer.from(bytes).toString("base64"), at, { collateral: c })).toEqual(binary);
    expect(
      verifyQuote({
        quote: parseQuote(bytes),
        at: new Date(at),
        trustedRootPem: INTEL_SGX_ROOT_CA_PEM,
        collateral: c,
      }),
    ).toEqual(binary);
  });

  it("only accepts the TCB statuses the policy lists", () => {
    const r = verify(fixture(PHALA), "2025-07-01T00:00:00Z", {
      collateral: collateral("v4-dcap-qvl-phala"),
      policy: { acceptableTcbStatuses: ["SWHardeningNeeded"] },
    });
    expect(r.ok).toBe(false);
    expect(r.tcbStatus).toBe("UpToDate");
    expect(failed(r)).toEqual(["tcb_status"]);
  });
});

describe("collateral integrity", () => {
  const at = "2025-07-01T00:00:00Z";
  const good = (): Collateral => collateral("v4-dcap-qvl-phala");

  it("rejects collateral of the wrong shape", () => {
    const r = verify(fixture(PHALA), at, { collateral: {} as Collateral });
    expect(failed(r)).toEqual(["collateral_format"]);
  });

  it("rejects a TCB info whose signed text was altered", () => {
    const c = good();
    c.tcb_info = c.tcb_info.replace('"tcbStatus":"OutOfDate"', '"tcbStatus":"UpToDate"');
    expect(failed(verify(fixture(PHALA), at, { collateral: c }))).toEqual(["tcb_info_signature"]);
    const spaced = good();
    spaced.tcb_info = ` ${spaced.tcb_info}`;
    expect(failed(verify(fixture(PHALA), at, { collateral: spaced }))).toEqual([
      "tcb_info_signature",
    ]);
  });

  it("rejects a QE identity whose signature was altered or truncated", () => {
    const c = good();
    c.qe_identity_signature = c.qe_identity_signature.replace(/^../, "00");
    expect(failed(verify(fixture(PHALA), at, { collateral: c }))).toEqual([
      "qe_identity_signature",
    ]);
    const short = good();
    short.qe_identity_signature = short.qe_identity_signature.slice(2);
    expect(failed(verify(fixture(PHALA), at, { collateral: short }))).toEqual([
      "qe_identity_signature",
    ]);
  });

  it("rejects CRLs whose bytes were altered", () => {
    for (const field of ["pck_crl", "root_ca_crl"] as const) {
      const c = good();
      const flipAt = c[field].length - 100;
      const digit = c[field][flipAt] === "0" ? "1" : "0";
      c[field] = c[field].slice(0, flipAt) + digit + c[field].slice(flipAt + 1);
      const r = verify(fixture(PHALA), at, { collateral: c });
      expect(r.ok).toBe(false);
      expect(failed(r)).toContain(field);
    }
  });

  it("rejects a TCB signing chain that does not end in the pinned root", () => {
    const c = good();
    c.tcb_info_issuer_chain = c.pck_crl_issuer_chain;
    expect(failed(verify(fixture(PHALA), at, { collateral: c }))).toEqual(["tcb_info_signature"]);
  });

  it("rejects TCB info issued for another platform (FMSPC mismatch)", () => {
    // v5 quote (FMSPC 90c06f…) with the phala collateral (FMSPC b0c06f…).
    const r = verify(fixture(V5), "2026-02-03T01:00:00Z", { collateral: good() });
    expect(check(r, "tcb_info_match").ok).toBe(false);
    expect(check(r, "tcb_info_match").detail).toContain("b0c06f000000");
  });
});

describe("v4-go-tdx-guest-spr: crypto-valid, TCB not supported", () => {
  const want = expectedFor(SPR);
  const [from, to] = want.expect.fullCollateralWindow!;

  it("verifies signatures and chain without collateral at 2023-07-01", () => {
    const r = verify(fixture(SPR), "2023-07-01T01:00:00Z");
    expect(failed(r)).toEqual([]);
    expect(r.fields?.mrtd).toBe(want.parsed.mrTd);
    expect(r.fields?.reportdata).toBe(want.parsed.reportData);
  });

  it("fails at 2053-07-01 because the PCK certificate expired", () => {
    const r = verify(fixture(SPR), "2053-07-01T01:00:00Z");
    expect(failed(r)).toEqual(["pck_chain_validity"]);
    expect(r.reason).toContain("expired at 2029-09-20T13:20:31Z");
  });

  for (const at of [from, "2023-07-01T01:00:00Z", to]) {
    it(`with its collateral at ${at}: every collateral check passes but no TCB level matches`, () => {
      const r = verify(fixture(SPR), at, { collateral: collateral("v4-go-tdx-guest-spr") });
      expect(r.ok).toBe(false);
      expect(failed(r)).toEqual(["tcb_level"]);
      expect(r.reason).toContain("no matching TCB level");
      expect(r.tcbStatus).toBeNull();
      expect(check(r, "qe_identity_match").detail).toContain("UpToDate");
    });
  }

  const mutations = want.negativeMutations!.cases;
  for (const { offset, value, reason } of mutations) {
    it(`go-tdx-guest mutation ${offset}→${value} fails (${reason})`, () => {
      const bytes = fixture(SPR);
      bytes[offset] = value;
      const r = verify(bytes, "2023-07-01T01:00:00Z");
      expect(r.ok).toBe(false);
    });
  }
});

describe("v5-go-tdx-guest: TD report 1.5", () => {
  it("verifies at 2026-02-03 and exposes the TD 1.5 fields", () => {
    const want = expectedFor(V5).parsed;
    const r = verify(fixture(V5), "2026-02-03T01:00:00Z");
    expect(failed(r)).toEqual([]);
    expect(r.fields).toMatchObject({
      version: 5,
      body_type: 3,
      mrtd: want.mrTd,
      tee_tcb_svn_2: want.teeTcbSvn2,
      mrservicetd: want.mrServiceTd,
      reportdata: want.reportData,
    });
    expect(check(r, "mrservicetd").ok).toBe(true);
  });

  it("fails before the PCK certificate's notBefore (2026-01-27T14:36:27Z)", () => {
    expect(verify(fixture(V5), "2026-01-27T14:36:27Z").ok).toBe(true);
    for (const at of ["2026-01-27T14:36:26Z", "2023-07-01T01:00:00Z"]) {
      const r = verify(fixture(V5), at);
      expect(failed(r)).toEqual(["pck_chain_validity"]);
      expect(r.reason).toContain("not valid before 2026-01-27T14:36:27Z");
    }
  });

  it("matches the shipped v5 TCB info as UpToDate (module TDX_01)", () => {
    const response = fixtureText("v5-go-tdx-guest.tcbinfo-response.json.txt");
    const split = splitPcsResponse(response, "tcbInfo");
    expect(split).toBeDefined();
    expect(response).toContain(split!.body);
    // Only TCB info is shipped for 2026: QE identity and CRLs come from the 2025 collateral,
    // so those are stale, and everything about the TCB info itself must pass.
    const c = {
      ...collateral("v4-dcap-qvl-phala"),
      tcb_info: split!.body,
      tcb_info_signature: split!.signature,
    };
    const r = verify(fixture(V5), "2026-02-03T01:00:00Z", { collateral: c });
    for (const name of [
      "tcb_info_signature",
      "tcb_info_format",
      "tcb_info_freshness",
      "tcb_info_match",
      "tdx_module",
      "tcb_level",
    ]) {
      expect(check(r, name).ok, name).toBe(true);
    }
    expect(check(r, "tcb_level").detail).toMatch(/^UpToDate/);
    expect(check(r, "tdx_module").detail).toBe("TDX_01: UpToDate");
    expect(r.ok).toBe(false);
    expect(failed(r)).toEqual(expect.arrayContaining(["qe_identity_freshness", "pck_crl"]));
  });

  it("rejects a bound service TD", () => {
    const bytes = fixture(V5);
    const q = parseQuote(bytes);
    const tampered = { ...q, body: { ...q.body, mrservicetd: "01".padEnd(96, "0") } };
    const r = verifyQuote({
      quote: tampered,
      at: new Date("2026-02-03T01:00:00Z"),
      trustedRootPem: INTEL_SGX_ROOT_CA_PEM,
    });
    expect(check(r, "mrservicetd").ok).toBe(false);
  });
});

describe("v4-trustee-debug: debug TD", () => {
  const at = "2024-07-01T00:00:00Z";

  it("is rejected by default although every signature is valid", () => {
    const r = verify(fixture(DEBUG), at);
    expect(failed(r)).toEqual(["td_debug"]);
    expect(r.reason).toContain("DEBUG set");
    expect(r.fields?.td_attributes).toBe("0100001000000000");
  });

  it("passes only with allowDebug", () => {
    expect(verify(fixture(DEBUG), at, { policy: { allowDebug: true } }).ok).toBe(true);
  });
});

describe("byte flips in a valid quote all fail verification", () => {
  const bytes = fixture(PHALA);
  const parsed = expectedFor(PHALA).parsed;
  const at = "2025-07-01T00:00:00Z";
  const pem = pemOffset(parsed);
  const pems = parseQuote(bytes).pckCertChainPem;
  const text = Buffer.from(bytes).toString("latin1");
  const certStart = (i: number): number => text.indexOf(pems[i]!) + 200;

  const regions: [string, number[]][] = [
    ["header", [0, 1, 2, 4, 8, 10, 12, 20, 28, 40, 47]],
    ["body", [48, 64, 120, 168, 176, 184, 200, 376, 424, 472, 520, 568, 600, 631]],
    ["sig_data_len", [632, 633, 634]],
    ["quote signature", [636, 660, 699]],
    ["attestation key", [700, 731, 732, 763]],
    ["cert data header", [764, 766, 767]],
    ["QE report", [770, 786, 818, 834, 866, 898, 962, 1026, 1028, 1090, 1122, 1153]],
    ["QE report signature", [1154, 1185, 1217]],
    ["QE auth data", [1218, 1220, 1251]],
    ["PCK cert data header", [1252, 1254]],
    ["PCK leaf", [certStart(0), certStart(0) + 500]],
    ["intermediate", [certStart(1), certStart(1) + 300]],
    ["root", [certStart(2), certStart(2) + 300]],
  ];
  for (const [region, offsets] of regions) {
    it(`flipping bytes in the ${region} fails`, () => {
      for (const offset of offsets) {
        const copy = bytes.slice();
        copy[offset] = copy[offset]! ^ 0x01;
        const r = verify(copy, at, { collateral: collateral("v4-dcap-qvl-phala") });
        expect(r.ok, `offset ${offset}`).toBe(false);
        const copy2 = bytes.slice();
        copy2[offset] = copy2[offset]! ^ 0xff;
        expect(verify(copy2, at).ok, `offset ${offset} (0xff)`).toBe(false);
      }
    });
  }

  it("flipping any byte before the PEM text fails (stride over the whole signed structure)", () => {
    for (let offset = 0; offset < pem; offset += 7) {
      const copy = bytes.slice();
      copy[offset] = copy[offset]! ^ 0x80;
      expect(verify(copy, at).ok, `offset ${offset}`).toBe(false);
    }
  });

  it("bytes after the signature data are ignored", () => {
    const copy = bytes.slice();
    copy[parsed.sigDataEnd + 3] = 0x55;
    expect(verify(copy, at).ok).toBe(true);
  });
});

describe("policy", () => {
  const at = "2025-07-01T00:00:00Z";
  const want = expectedFor(PHALA).parsed;
  const approved = {
    id: "phala-dstack",
    mrtd: want.mrTd,
    rtmr0: want.rtmr0,
    rtmr1: want.rtmr1,
    rtmr2: want.rtmr2,
    rtmr3: want.rtmr3,
  };

  it("passes when an approved set matches all its fields", () => {
    const r = verify(fixture(PHALA), at, { policy: { approvedMeasurements: [approved] } });
    expect(r.ok).toBe(true);
    expect(r.matchedMeasurementSet).toBe("phala-dstack");
  });

  it("passes when any set matches, compares hex case-insensitively", () => {
    const other = { ...approved, id: undefined, rtmr3: "11".repeat(48) };
    const upper = { mrtd: want.mrTd.toUpperCase(), rtmr1: want.rtmr1.toUpperCase() };
    const r = verify(fixture(PHALA), at, { policy: { approvedMeasurements: [other, upper] } });
    expect(r.ok).toBe(true);
    expect(r.matchedMeasurementSet).toBe("#1");
  });

  it("fails when no set matches, or none is approved", () => {
    for (const sets of [
      [{ ...approved, rtmr2: "00".repeat(48) }],
      [{ mrtd: "ab".repeat(48) }],
      [],
    ]) {
      const r = verify(fixture(PHALA), at, { policy: { approvedMeasurements: sets } });
      expect(failed(r)).toEqual(["measurements"]);
      expect(r.matchedMeasurementSet).toBeNull();
    }
  });

  it("checks REPORTDATA exactly", () => {
    const ok = verify(fixture(PHALA), at, { policy: { expectedReportData: want.reportData } });
    expect(check(ok, "report_data").ok).toBe(true);
    const off = want.reportData.slice(0, -1) + (want.reportData.endsWith("0") ? "1" : "0");
    const bad = verify(fixture(PHALA), at, { policy: { expectedReportData: off } });
    expect(failed(bad)).toEqual(["report_data"]);
  });

  it("never accepts Revoked even when listed", () => {
    const r = verify(fixture(PHALA), at, {
      collateral: collateral("v4-dcap-qvl-phala"),
      policy: { acceptableTcbStatuses: ["Revoked"] },
    });
    expect(check(r, "tcb_status").detail).toContain("accepted: none");
  });

  it("throws on programmer errors only", () => {
    const bytes = fixture(PHALA);
    expect(() => verify(bytes, "not a date")).toThrow(TypeError);
    expect(() => verify(bytes, at, { root: "nope" })).toThrow(TypeError);
    expect(() => verify(bytes, at, { policy: { expectedReportData: "abcd" } })).toThrow(TypeError);
    expect(() => verify(bytes, at, { policy: { approvedMeasurements: [{ mrtd: "zz" }] } })).toThrow(
      TypeError,
    );
    expect(() =>
      verify(bytes, at, { policy: { acceptableTcbStatuses: ["Fine" as "UpToDate"] } }),
    ).toThrow(TypeError);
    const garbage = verify(new Uint8Array([1, 2, 3]), at);
    expect(garbage.ok).toBe(false);
    expect(failed(garbage)).toEqual(["quote_format"]);
    expect(garbage.fields).toBeNull();
  });

  it("rejects a chain that does not end in the trusted root", () => {
    const otherRoot = parseQuote(fixture(PHALA)).pckCertChainPem[1]!;
    const r = verify(fixture(PHALA), at, { root: otherRoot });
    expect(failed(r)).toEqual(["pck_chain"]);
    expect(r.reason).toContain("not the pinned root");
  });
});
