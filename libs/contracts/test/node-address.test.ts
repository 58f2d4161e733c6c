import { describe, expect, it } from "vitest";
import {
  createNodeAddressPolicy,
  endpointProblem,
  hostRefusal,
  nodeAddressPolicyFromEnv,
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
      expect(defaults.refusal(a)?.rule, a).toBe("node_address_metadata");
    }
    for (const a of ["10.0.0.5", "192.168.1.2", "2001:db8::1", "8.8.8.8", "1.0.0.1"]) {
      expect(defaults.refusal(a), a).toBeUndefined();
    }
  });

  it("refuses loopback and unspecified addresses by default, IPv4-mapped ones too", () => {
    for (const a of ["127.0.0.1", "127.255.255.254", "::1", "::ffff:127.0.0.1", "::ffff:7f00:1"]) {
      expect(defaults.refusal(a)?.rule, a).toBe("node_address_loopback");
    }
    for (const a of ["0.0.0.0", "0.1.2.3", "::", "::ffff:0.0.0.0"]) {
      expect(defaults.refusal(a)?.rule, a).toBe("node_address_unspecified");
    }
    expect(defaults.refusal("127.0.0.1")?.message).toMatch(/ZML_NODE_ALLOW_LOOPBACK=true/);
  });

  it("allows loopback only with the loopback allowance, which leaves unspecified refused", () => {
    const loopback = createNodeAddressPolicy({ allow: [], deny: [], allowLoopback: true });
    for (const a of ["127.0.0.1", "127.0.0.53", "::1", "::ffff:7f00:1"]) {
      expect(loopback.refusal(a), a).toBeUndefined();
    }
    expect(loopback.refusal("0.0.0.0")?.rule).toBe("node_address_unspecified");
    expect(loopback.refusal("::")?.rule).toBe("node_address_unspecified");
    expect(loopback.refusal("169.254.169.254")?.rule).toBe("node_address_metadata");
    // The operator's deny list still wins over the allowance.
    const denied = createNodeAddressPolicy({ allow: [], deny: ["127.0.0.2"], allowLoopback: true });
    expect(denied.refusal("127.0.0.2")?.rule).toBe("node_address_denied");
    expect(denied.refusal("127.0.0.1")).toBeUndefined();
  });

  it("applies the operator's deny before allow, and allow before the defaults", () => {
    const p = createNodeAddressPolicy({
      allow: ["169.254.10.0/24", "10.0.0.0/8", "0.0.0.0/32"],
      deny: ["10.9.0.0/16"],
    });
    expect(p.refusal("169.254.10.7")).toBeUndefined();
    expect(p.refusal("169.254.169.254")?.message).toMatch(/metadata/);
    expect(p.refusal("10.9.1.1")).toEqual({
      rule: "node_address_denied",
      message: "10.9.1.1 is denied by the operator",
    });
    expect(p.refusal("10.1.1.1")).toBeUndefined();
    expect(p.refusal("0.0.0.0")).toBeUndefined();
    expect(p.refusal("127.0.0.1")?.rule).toBe("node_address_loopback");
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
  it("refuses credentials, metadata hosts and denied literal addresses, with their codes", () => {
    const code = (e: string) => endpointProblem(e, defaults)?.code;
    const message = (e: string) => endpointProblem(e, defaults)?.message;
    expect(code("http://user:pw@10.0.0.5:8000")).toBe("invalid_request");
    expect(message("http://user:pw@10.0.0.5:8000")).toMatch(/credentials/);
    expect(code("http://metadata.google.internal/")).toBe("node_address_metadata");
    expect(message("http://metadata.google.internal/")).toMatch(/metadata host/);
    expect(message("http://169.254.169.254/latest")).toMatch(/metadata address/);
    expect(code("http://[fe80::1]:8000")).toBe("node_address_metadata");
    expect(code("ftp://10.0.0.5")).toBe("invalid_request");
    expect(code("not a url")).toBe("invalid_request");
  });

  // Every spelling WHATWG URL parsing turns into a loopback address, as the dispatcher's
  // `new URL(endpoint)` would dial it: decimal, hex, octal, short dotted forms, a trailing
  // dot, percent-encoding, full-width digits, IPv6 in long form and IPv4-mapped.
  const LOOPBACK_SPELLINGS = [
    "http://127.0.0.1:8000",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0x7F.0.0.1/",
    "http://0177.0.0.1/",
    "http://017700000001/",
    "http://0x7f.1/",
    "http://127.1/",
    "http://127.0.1/",
    "http://127.0.0.1./",
    "http://127.255.255.254/",
    "http://%31%32%37.0.0.1/",
    "http://１２７.０.０.１/",
    "http://[::1]:4222",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[0:0:0:0:0:ffff:7f00:0001]/",
    "https://localhost:8222/varz",
    "http://LOCALHOST/",
    "http://localhost./",
    "http://node.localhost:8000/",
    "http://a.b.LocalHost./",
  ];
  const UNSPECIFIED_SPELLINGS = [
    "http://0.0.0.0:6379",
    "http://0/",
    "http://0x0/",
    "http://0.0/",
    "http://00.00.00.00/",
    "http://[::]/",
    "http://[0:0:0:0:0:0:0:0]/",
    "http://[::ffff:0.0.0.0]/",
  ];

  it("refuses every spelling of loopback, naming the rule", () => {
    for (const e of LOOPBACK_SPELLINGS) {
      expect(endpointProblem(e, defaults)?.code, e).toBe("node_address_loopback");
    }
    expect(endpointProblem("http://localhost:8222/varz", defaults)?.message).toBe(
      "localhost is the gateway's own host, not a node (ZML_NODE_ALLOW_LOOPBACK=true allows it)",
    );
  });

  it("refuses every spelling of the unspecified address, with or without the loopback allowance", () => {
    const loopback = createNodeAddressPolicy({ allow: [], deny: [], allowLoopback: true });
    for (const e of UNSPECIFIED_SPELLINGS) {
      expect(endpointProblem(e, defaults)?.code, e).toBe("node_address_unspecified");
      expect(endpointProblem(e, loopback)?.code, e).toBe("node_address_unspecified");
    }
  });

  it("accepts every loopback spelling with the loopback allowance", () => {
    const loopback = createNodeAddressPolicy({ allow: [], deny: [], allowLoopback: true });
    for (const e of LOOPBACK_SPELLINGS) expect(endpointProblem(e, loopback), e).toBeUndefined();
    // `localhost` stands for both families' loopback: allowing one of them is not enough.
    const v4Only = createNodeAddressPolicy({ allow: ["127.0.0.0/8"], deny: [] });
    expect(endpointProblem("http://127.0.0.1/", v4Only)).toBeUndefined();
    expect(endpointProblem("http://localhost/", v4Only)?.code).toBe("node_address_loopback");
    // A deny of a loopback address refuses `localhost` as denied.
    const denied = createNodeAddressPolicy({ allow: [], deny: ["::1"], allowLoopback: true });
    expect(endpointProblem("http://localhost/", denied)?.code).toBe("node_address_denied");
  });

  it("accepts ordinary node endpoints, and names that merely look local", () => {
    for (const e of [
      "http://10.0.0.5:8000",
      "https://gpu.example.com/v1base",
      "http://128.0.0.1/",
      "http://126.255.255.255/",
      "http://1.0.0.0/",
      "http://[2001:db8::1]/",
      "http://localhost.example.com/",
      "http://mylocalhost/",
    ]) {
      expect(endpointProblem(e, defaults), e).toBeUndefined();
    }
  });
});

describe("the node address settings", () => {
  it("read the same settings everywhere, listing every wrong one", () => {
    const policy = nodeAddressPolicyFromEnv({ ZML_NODE_ALLOW_LOOPBACK: "true" });
    expect(policy.refusal("127.0.0.1")).toBeUndefined();
    expect(nodeAddressPolicyFromEnv({}).refusal("127.0.0.1")?.rule).toBe("node_address_loopback");
    expect(nodeAddressPolicyFromEnv({ ZML_NODE_ALLOW_LOOPBACK: "0" }).refusal("::1")).toBeDefined();
    const wrong = () =>
      nodeAddressPolicyFromEnv({ ZML_NODE_ALLOW_LOOPBACK: "maybe", ZML_NODE_DENY_CIDRS: "x" });
    expect(wrong).toThrow(/ZML_NODE_ALLOW_LOOPBACK: /);
    expect(wrong).toThrow(/ZML_NODE_DENY_CIDRS: 'x' is not an IP address/);
  });
});

describe("hostRefusal", () => {
  it("judges literals and local names, and leaves other names to the resolver", () => {
    expect(hostRefusal("[::1]", defaults)?.rule).toBe("node_address_loopback");
    expect(hostRefusal("localhost", defaults)?.rule).toBe("node_address_loopback");
    expect(hostRefusal("instance-data", defaults)?.rule).toBe("node_address_metadata");
    expect(hostRefusal("node.example.test", defaults)).toBeUndefined();
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
