import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { findDuplicateKey, isValidUtf8 } from "../src/request/json-guard.ts";
import { parseJsonObject } from "../src/request/validation.ts";

describe("findDuplicateKey", () => {
  it("finds a repeated top-level key", () => {
    expect(findDuplicateKey('{"model":"a","stream":true,"model":"b"}')).toBe("model");
  });

  it("names the path of a repeated nested key, through arrays", () => {
    expect(findDuplicateKey('{"provider":{"sort":"quality","sort":"price"}}')).toBe(
      "provider.sort",
    );
    expect(findDuplicateKey('{"messages":[{"role":"user"},{"role":"user","role":"system"}]}')).toBe(
      "messages.1.role",
    );
  });

  it("treats an escaped key as its decoded name", () => {
    expect(findDuplicateKey('{"model":"a","mod\\u0065l":"b"}')).toBe("model");
  });

  it("is not fooled by keys, quotes, braces and commas inside string values", () => {
    const text = JSON.stringify({
      model: "m",
      messages: [{ role: "user", content: 'say "model": {"model": 1}, [x], \\" and \\\\' }],
    });
    expect(findDuplicateKey(text)).toBeUndefined();
  });

  it("allows the same key in sibling objects", () => {
    expect(findDuplicateKey('{"a":{"k":1},"b":{"k":2},"c":[{"k":1},{"k":2}]}')).toBeUndefined();
  });

  it("agrees with a parse of any JSON.stringify output: never a duplicate", () => {
    fc.assert(
      fc.property(fc.json(), (text) => {
        expect(findDuplicateKey(text)).toBeUndefined();
      }),
    );
  });

  it("finds a key repeated at the top level of any object built from distinct keys", () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.string(), fc.jsonValue(), { minKeys: 1 }),
        fc.nat(),
        (obj, pick) => {
          const keys = Object.keys(obj);
          const repeated = keys[pick % keys.length]!;
          const text = `${JSON.stringify(obj).slice(0, -1)},${JSON.stringify(repeated)}:0}`;
          expect(findDuplicateKey(text)).toBe(repeated);
        },
      ),
    );
  });
});

describe("isValidUtf8", () => {
  it("accepts UTF-8 and refuses invalid sequences, overlong forms and lone surrogates", () => {
    expect(isValidUtf8(Buffer.from('{"content":"héllo ✓ 🚀"}'))).toBe(true);
    expect(isValidUtf8(Buffer.from([0x7b, 0xff, 0x7d]))).toBe(false);
    expect(isValidUtf8(Buffer.from([0xc0, 0xaf]))).toBe(false); // overlong "/"
    expect(isValidUtf8(Buffer.from([0xed, 0xa0, 0x80]))).toBe(false); // U+D800
  });
});

describe("parseJsonObject", () => {
  it("refuses invalid UTF-8 as invalid_json on body", () => {
    const raw = Buffer.concat([Buffer.from('{"model":"'), Buffer.from([0xff]), Buffer.from('"}')]);
    expect(() => parseJsonObject(raw)).toThrow(
      expect.objectContaining({ code: "invalid_json", param: "body", status: 400 }),
    );
  });

  it("refuses a repeated key as duplicate_field naming it", () => {
    expect(() => parseJsonObject(Buffer.from('{"model":"a","model":"b"}'))).toThrow(
      expect.objectContaining({ code: "duplicate_field", param: "model", status: 400 }),
    );
  });
});
