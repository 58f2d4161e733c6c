import { describe, expect, it } from "vitest";
import {
  createNodeAddressPolicy,
  endpointProblem,
  NodeSpecSchema,
  parseCidrList,
} from "../src/index.ts";

const defaults = createNodeAddressPolicy({ allow: [], deny: [] });

describe("node address policy", () => {
  it("refuses link-local and metadata addresses by default, v4, v6 and v4-mapped", () => {
    for (const a of [
      "169.254.169.254",
      "169.254.1.1",
      "fe80::1",
      "fd00:ec2::254",
      "100.100.100.200",
      "::ffff:169.254.169.254",
    ]) {
      expect(defaults.refusal(a), a).toBeDefined();
    }
    for (const a of ["10.0.0.5", "127.0.0.1", "192.168.1.2", "2001:db8::1", "8.8.8.8"]) {
      expect(defaults.refusal(a), a).toBeUndefined();
    }
  });

  it("applies the operator's deny before allow, and allow before the defaults", () => {
    const p = createNodeAddressPolicy({
      allow: ["169.254.10.0/24", "10.0.0.0/8"],
      deny: ["10.9.0.0/16"],
    });
    expect(p.refusal("169.254.10.7")).toBeUndefined();
    expect(p.refusal("169.254.169.254")).toMatch(/metadata/);
    expect(p.refusal("10.9.1.1")).toMatch(/denied by the operator/);
    expect(p.refusal("10.1.1.1")).toBeUndefined();
  });

  it("parses CIDR lists and names a bad entry", () => {
    expect(parseCidrList(" 10.0.0.0/8, fd00::/8 ,192.0.2.1")).toEqual([
      "10.0.0.0/8",
      "fd00::/8",
      "192.0.2.1",
    ]);
    expect(parseCidrList(undefined)).toEqual([]);
    expect(() => parseCidrList("10.0.0.0/33")).toThrow("'10.0.0.0/33'");
    expect(() => parseCidrList("example.com")).toThrow("'example.com'");
  });
});

describe("endpointProblem", () => {
  it("refuses credentials, metadata hosts and denied literal addresses", () => {
    expect(endpointProblem("http://user:pw@10.0.0.5:8000", defaults)).toMatch(/credentials/);
    expect(endpointProblem("http://metadata.google.internal/", defaults)).toMatch(/metadata host/);
    expect(endpointProblem("http://169.254.169.254/latest", defaults)).toMatch(/metadata address/);
    expect(endpointProblem("http://[fe80::1]:8000", defaults)).toMatch(/link-local/);
    expect(endpointProblem("ftp://10.0.0.5", defaults)).toMatch(/http or https/);
  });

  it("accepts ordinary node endpoints", () => {
    for (const e of [
      "http://10.0.0.5:8000",
      "https://gpu.example.com/v1base",
      "http://127.0.0.1:18101",
    ]) {
      expect(endpointProblem(e, defaults), e).toBeUndefined();
    }
  });
});

describe("NodeSpecSchema", () => {
  it("refuses an endpoint with credentials in it", () => {
    const result = NodeSpecSchema.safeParse({
      id: "n",
      endpoint: "https://key:secret@provider.example.com",
      framework: "openai",
      accelerator_family: "H100",
      tier: 1,
      models: ["m"],
    });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path).toEqual(["endpoint"]);
  });
});

describe("NodeSpecSchema endpoint", () => {
  it("reports a string that is not a URL as a schema problem, not a crash", () => {
    const result = NodeSpecSchema.safeParse({
      id: "n",
      endpoint: "not a url",
      framework: "vllm",
      accelerator_family: "H100",
      tier: 1,
      models: ["m"],
    });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path).toEqual(["endpoint"]);
  });
});
