import { X509Certificate } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  TCB_STATUSES,
  parsePckExtension,
  parseQeIdentity,
  parseQuote,
  parseTcbInfo,
  splitPcsResponse,
  type TcbInfo,
  type TcbStatus,
} from "../src/index.ts";
import {
  convergeTcbStatus,
  matchPlatformTcbLevel,
  matchQeIdentity,
  matchTdxModule,
} from "../src/tcb.ts";
import { collateral, fixture, fixtureText } from "./fixtures.ts";

const phala = parseQuote(fixture("v4-dcap-qvl-phala.bin"));
const phalaPck = parsePckExtension(
  new Uint8Array(new X509Certificate(phala.pckCertChainPem[0]!).raw),
);
const phalaSvn = Buffer.from(phala.body.tee_tcb_svn, "hex");
const phalaTcbInfo = (): TcbInfo => parseTcbInfo(collateral("v4-dcap-qvl-phala").tcb_info);

describe("platform TCB level", () => {
  it("picks the first level the PCK and TEE_TCB_SVN meet", () => {
    expect(matchPlatformTcbLevel(phalaTcbInfo(), phalaPck, phalaSvn)?.tcbDate).toBe(
      "2024-03-13T00:00:00Z",
    );
  });

  it("falls to a lower level on a low PCESVN, and to none on a low SGX component", () => {
    const pck = {
      ...phalaPck,
      sgxTcbComponents: phalaPck.sgxTcbComponents.map((v, i) => (i === 1 ? 1 : v)),
    };
    expect(matchPlatformTcbLevel(phalaTcbInfo(), pck, phalaSvn)).toBeUndefined();
    const lowPce = { ...phalaPck, pcesvn: 5 };
    const level = matchPlatformTcbLevel(phalaTcbInfo(), lowPce, phalaSvn);
    expect(level?.tcbStatus).toBe("OutOfDate");
    expect(level?.advisoryIds).toContain("INTEL-SA-00837");
  });

  it("skips TDX components 0 and 1 only when the module major version is non-zero", () => {
    const info = phalaTcbInfo();
    for (const level of info.tcbLevels) level.tdxTcbComponents[0] = 200;
    expect(matchPlatformTcbLevel(info, phalaPck, phalaSvn)).toBeDefined();
    const major0 = Buffer.from(phalaSvn);
    major0[1] = 0;
    expect(matchPlatformTcbLevel(info, phalaPck, major0)).toBeUndefined();
    const lowLateMicrocode = Buffer.from(phalaSvn);
    lowLateMicrocode[2] = 1;
    expect(matchPlatformTcbLevel(phalaTcbInfo(), phalaPck, lowLateMicrocode)).toBeUndefined();
  });
});

describe("TDX module identity", () => {
  it("uses TDX_%02X for the module major version and its ISVSVN levels", () => {
    const match = matchTdxModule(phalaTcbInfo(), phala.body);
    expect(match).toMatchObject({ id: "TDX_01", level: { tcbStatus: "UpToDate" } });
    const old = matchTdxModule(phalaTcbInfo(), {
      ...phala.body,
      tee_tcb_svn: "0301" + "00".repeat(14),
    });
    expect(old).toMatchObject({ level: { tcbStatus: "OutOfDate" } });
    const none = matchTdxModule(phalaTcbInfo(), {
      ...phala.body,
      tee_tcb_svn: "0101" + "00".repeat(14),
    });
    expect(none).toHaveProperty("problem");
  });

  it("rejects an unknown module version, a foreign signer and SEAM attributes", () => {
    expect(
      matchTdxModule(phalaTcbInfo(), { ...phala.body, tee_tcb_svn: "0602" + "00".repeat(14) }),
    ).toEqual({
      problem: "module TDX_02 not listed in the TCB info",
    });
    expect(
      matchTdxModule(phalaTcbInfo(), { ...phala.body, mrsignerseam: "01".repeat(48) }),
    ).toHaveProperty("problem");
    expect(
      matchTdxModule(phalaTcbInfo(), { ...phala.body, seam_attributes: "0100000000000000" }),
    ).toHaveProperty("problem");
  });
});

describe("QE identity", () => {
  const identity = () => parseQeIdentity(collateral("v4-dcap-qvl-phala").qe_identity);

  it("matches Intel's TD-QE and applies the attribute mask", () => {
    expect(matchQeIdentity(identity(), phala.qeReport)).toMatchObject({
      level: { tcbStatus: "UpToDate" },
    });
  });

  it("rejects a foreign signer, product, misc select, attributes or a too-old ISVSVN", () => {
    const qe = phala.qeReport;
    expect(matchQeIdentity(identity(), { ...qe, mrsigner: "00".repeat(32) })).toHaveProperty(
      "problem",
    );
    expect(matchQeIdentity(identity(), { ...qe, isvprodid: 1 })).toHaveProperty("problem");
    expect(matchQeIdentity(identity(), { ...qe, miscselect: 1 })).toHaveProperty("problem");
    expect(
      matchQeIdentity(identity(), { ...qe, attributes: "17" + qe.attributes.slice(2) }),
    ).toHaveProperty("problem");
    // Bit 0x04 of the first byte is outside the mask, so it may differ.
    expect(
      matchQeIdentity(identity(), { ...qe, attributes: "11" + qe.attributes.slice(2) }),
    ).toHaveProperty("level");
    expect(matchQeIdentity(identity(), { ...qe, isvsvn: 3 })).toEqual({
      problem: "QE ISVSVN 3 is below every level",
    });
  });
});

describe("status convergence", () => {
  const table: [TcbStatus, TcbStatus, TcbStatus][] = [
    ["UpToDate", "UpToDate", "UpToDate"],
    ["SWHardeningNeeded", "UpToDate", "SWHardeningNeeded"],
    ["UpToDate", "OutOfDate", "OutOfDate"],
    ["SWHardeningNeeded", "OutOfDate", "OutOfDate"],
    ["ConfigurationNeeded", "OutOfDate", "OutOfDateConfigurationNeeded"],
    ["ConfigurationAndSWHardeningNeeded", "OutOfDate", "OutOfDateConfigurationNeeded"],
    ["OutOfDate", "OutOfDate", "OutOfDate"],
    ["UpToDate", "Revoked", "Revoked"],
    ["Revoked", "UpToDate", "Revoked"],
  ];
  for (const [platform, component, merged] of table) {
    it(`${platform} + ${component} → ${merged}`, () => {
      expect(convergeTcbStatus(platform, component)).toBe(merged);
    });
  }

  it("knows the seven Intel statuses", () => {
    expect(TCB_STATUSES).toHaveLength(7);
  });
});

describe("collateral documents", () => {
  it("rejects unknown statuses and malformed fields naming the path", () => {
    const text = collateral("v4-dcap-qvl-phala").tcb_info;
    expect(() =>
      parseTcbInfo(text.replace('"tcbStatus":"OutOfDate"', '"tcbStatus":"Meh"')),
    ).toThrow(/tcbLevels\[1\]\.tcbStatus/);
    expect(() => parseTcbInfo(text.replace('"fmspc":"B0C06F000000"', '"fmspc":"B0C0"'))).toThrow(
      /fmspc/,
    );
    expect(() => parseTcbInfo("{")).toThrow(/not JSON/);
  });

  it("splits a raw PCS response into exact signed text and signature", () => {
    const response = fixtureText("v5-go-tdx-guest.tcbinfo-response.json.txt");
    const split = splitPcsResponse(response, "tcbInfo");
    expect(split?.body.startsWith('{"id":"TDX"')).toBe(true);
    expect(JSON.parse(split!.body)).toEqual((JSON.parse(response) as { tcbInfo: unknown }).tcbInfo);
    expect(split?.signature).toMatch(/^[0-9a-f]{128}$/);
    expect(splitPcsResponse(response, "enclaveIdentity")).toBeUndefined();
    expect(splitPcsResponse("not json", "tcbInfo")).toBeUndefined();
    const tricky = '{"signature":"ab", "note":"\\"tcbInfo\\": {", "tcbInfo" : {"a":"}","b":[{}]} }';
    expect(splitPcsResponse(tricky, "tcbInfo")).toEqual({
      body: '{"a":"}","b":[{}]}',
      signature: "ab",
    });
  });
});
