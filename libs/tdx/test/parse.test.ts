import fc from "fast-check";
import { X509Certificate } from "node:crypto";
import { describe, expect, it } from "vitest";
import { QuoteParseError, parsePckExtension, parseQuote, type TdxQuote } from "../src/index.ts";
import { QUOTE_FILES, expectedFor, fixture, pemOffset } from "./fixtures.ts";

function parseError(input: Uint8Array | string): QuoteParseError {
  try {
    parseQuote(input);
  } catch (err) {
    expect(err).toBeInstanceOf(QuoteParseError);
    return err as QuoteParseError;
  }
  throw new Error("expected a QuoteParseError");
}

function withByte(bytes: Uint8Array, offset: number, value: number): Uint8Array {
  const copy = bytes.slice();
  copy[offset] = value;
  return copy;
}

function withU32(bytes: Uint8Array, offset: number, value: number): Uint8Array {
  const copy = bytes.slice();
  new DataView(copy.buffer).setUint32(offset, value, true);
  return copy;
}

describe("parseQuote on real quotes", () => {
  for (const file of QUOTE_FILES) {
    it(`${file}: fields equal expected.json`, () => {
      const want = expectedFor(file).parsed;
      const bytes = fixture(file);
      expect(bytes.length).toBe(want.decodedBytes);
      const q = parseQuote(bytes);
      expect(q.header).toEqual({
        version: want.version,
        att_key_type: want.attKeyType,
        tee_type: Number(want.teeType),
        qe_vendor_id: want.qeVendorId,
        user_data: want.userData,
      });
      expect(q.bodyType).toBe(want.bodyType);
      expect(q.bodyOffset).toBe(want.bodyOffset);
      expect(q.signedRegion.length).toBe(want.sigDataLenOffset);
      expect(q.bytes.length).toBe(want.sigDataEnd);
      expect(q.trailingBytes).toBe(want.trailingBytesAfterSigData);
      expect(q.body).toEqual({
        tee_tcb_svn: want.teeTcbSvn,
        mrseam: want.mrSeam,
        mrsignerseam: want.mrSignerSeam,
        seam_attributes: want.seamAttributes,
        td_attributes: want.tdAttributes,
        xfam: want.xfam,
        mrtd: want.mrTd,
        mrconfigid: want.mrConfigId,
        mrowner: want.mrOwner,
        mrownerconfig: want.mrOwnerConfig,
        rtmr0: want.rtmr0,
        rtmr1: want.rtmr1,
        rtmr2: want.rtmr2,
        rtmr3: want.rtmr3,
        reportdata: want.reportData,
        tee_tcb_svn_2: want.teeTcbSvn2 ?? null,
        mrservicetd: want.mrServiceTd ?? null,
      });
      expect(q.qeReport).toEqual({
        cpusvn: expect.any(String) as string,
        miscselect: want.qeReport.miscSelect,
        attributes: want.qeReport.attributes,
        mrenclave: want.qeReport.mrEnclave,
        mrsigner: want.qeReport.mrSigner,
        isvprodid: want.qeReport.isvProdId,
        isvsvn: want.qeReport.isvSvn,
        reportdata: want.qeReport.reportData,
      });
      expect(Buffer.from(q.attestationKey).toString("hex")).toBe(want.attestationKey);
      expect(q.qeAuthData.length).toBe(want.qeAuthDataLen);
      expect(q.pckCertChainPem).toHaveLength(3);
    });

    it(`${file}: PCK certificate and SGX extension equal expected.json`, () => {
      const want = expectedFor(file).parsed.pck;
      const leaf = new X509Certificate(parseQuote(fixture(file)).pckCertChainPem[0]!);
      expect(leaf.serialNumber).toBe(want.serial);
      expect(leaf.validFromDate.toISOString()).toBe(want.notBefore.replace("Z", ".000Z"));
      expect(leaf.validToDate.toISOString()).toBe(want.notAfter.replace("Z", ".000Z"));
      const ext = parsePckExtension(new Uint8Array(leaf.raw));
      expect(ext).toMatchObject({
        fmspc: want.fmspc,
        pceid: want.pceId,
        pcesvn: want.pceSvn,
        cpusvn: want.cpuSvn,
        ppid: want.ppid,
      });
      expect(Buffer.from(ext.sgxTcbComponents).toString("hex")).toBe(want.cpuSvn);
    });

    it(`${file}: hex, base64 and base64url parse the same as binary`, () => {
      const bytes = fixture(file);
      const binary = parseQuote(bytes);
      const b = Buffer.from(bytes);
      const hex = b.toString("hex");
      const b64 = b.toString("base64");
      const inputs = [
        hex,
        hex.toUpperCase(),
        `0x${hex}`,
        `${hex.slice(0, 100)}\n${hex.slice(100)}\n`,
        b64,
        b64.replace(/.{76}/g, "$&\r\n"),
        b.toString("base64url"),
      ];
      for (const input of inputs) expect(parseQuote(input)).toEqual(binary);
    });
  }

  it("ignores trailing bytes and never includes them in the quote", () => {
    const bytes = fixture("v4-dcap-qvl-phala.bin");
    const q = parseQuote(bytes);
    expect(q.trailingBytes).toBe(70);
    expect(parseQuote(bytes.subarray(0, q.bytes.length))).toEqual({ ...q, trailingBytes: 0 });
  });

  it("does not alias the caller's buffer", () => {
    const bytes = fixture("v4-dcap-qvl-phala.bin");
    const q: TdxQuote = parseQuote(bytes);
    bytes[700] = bytes[700]! ^ 0xff;
    expect(Buffer.from(q.attestationKey).toString("hex")).toBe(
      expectedFor("v4-dcap-qvl-phala.bin").parsed.attestationKey,
    );
  });
});

describe("parseQuote on malformed input", () => {
  for (const file of ["v4-dcap-qvl-phala.bin", "v5-go-tdx-guest.bin"]) {
    it(`${file}: every truncation before the end of the signature data is a QuoteParseError`, () => {
      const bytes = fixture(file);
      const end = expectedFor(file).parsed.sigDataEnd;
      for (let length = 0; length < end; length++) {
        const err = parseError(bytes.subarray(0, length));
        expect(err.code).toBe("quote_parse_error");
        expect(err.field).not.toBe("");
      }
      expect(() => parseQuote(bytes.subarray(0, end))).not.toThrow();
    });
  }

  const v4 = fixture("v4-dcap-qvl-phala.bin");
  const v5 = fixture("v5-go-tdx-guest.bin");
  const cases: [string, Uint8Array | string, string, number | null][] = [
    ["version 3", withByte(v4, 0, 3), "version", 0],
    ["P-384 key type", withByte(v4, 2, 3), "att_key_type", 2],
    ["SGX tee type", withByte(v4, 4, 0), "tee_type", 4],
    ["v5 SGX body type", withByte(v5, 48, 1), "body_type", 48],
    ["v5 body size", withU32(v5, 50, 584), "body_size", 50],
    ["sig data length (go-tdx-guest 632→16)", withByte(v4, 632, 16), "cert_data_size", 766],
    ["sig data length too long", withU32(v4, 632, 0xffffffff), "signature_data", 636],
    ["cert data type 5", withByte(v4, 764, 5), "cert_data_type", 764],
    ["cert data size", withU32(v4, 766, 4165), "cert_data_size", 766],
    ["QE auth data length", withByte(v4, 1218, 33), "pck_cert_data_type", 1253],
    ["inner cert type 4", withByte(v4, 1252, 4), "pck_cert_data_type", 1252],
    ["inner cert size", withU32(v4, 1254, 3677), "pck_cert_data_size", 1254],
    ["empty string", "", "input", null],
    ["not hex or base64", "this is not a quote!", "input", null],
    ["odd hex", "0400020", "input", null],
    ["oversized", new Uint8Array(64 * 1024 + 1), "input", null],
  ];
  for (const [name, input, field, offset] of cases) {
    it(`rejects ${name} naming ${field}`, () => {
      const err = parseError(input);
      expect(err.field).toBe(field);
      expect(err.offset).toBe(offset);
      expect(err.message).toContain(field);
    });
  }

  it("rejects a non-string, non-bytes input with a QuoteParseError", () => {
    expect(parseError(42 as unknown as string).field).toBe("input");
  });

  it("never throws anything but QuoteParseError on random mutations", () => {
    const pem = pemOffset(expectedFor("v4-dcap-qvl-phala.bin").parsed);
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.nat({ max: pem + 40 }), fc.nat({ max: 255 })), { maxLength: 8 }),
        fc.nat({ max: v4.length }),
        (edits, length) => {
          const copy = v4.slice(0, length);
          for (const [offset, value] of edits) if (offset < copy.length) copy[offset] = value;
          try {
            parseQuote(copy);
          } catch (err) {
            return err instanceof QuoteParseError;
          }
          return true;
        },
      ),
      { numRuns: 500 },
    );
  });
});
