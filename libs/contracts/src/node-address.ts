// Where a node may be. A node endpoint is a URL an operator (or a stolen admin token) hands
// the gateway, which then sends prompts and credentials there and polls it: without limits it
// is a way to reach cloud metadata services, the gateway's own host (its NATS monitoring port,
// a local Redis) and to scan the operator's network. Checked when a node is registered, and
// again when a connection is made (after DNS).
import { BlockList, isIP } from "node:net";
import { z } from "zod";

/**
 * Why an address is refused, as a stable code: the error code of a refused registration, the
 * `rule` label of a refused connection.
 */
export const NODE_ADDRESS_RULES = {
  /** The gateway's own host: 127.0.0.0/8, ::1 (and their IPv4-mapped forms), `localhost`. */
  loopback: "node_address_loopback",
  /** 0.0.0.0/8 and `::`: a listening address, which a connection takes to the gateway's own host. */
  unspecified: "node_address_unspecified",
  /** Link-local ranges and cloud metadata addresses and host names. */
  metadata: "node_address_metadata",
  /** In the operator's `ZML_NODE_DENY_CIDRS`. */
  denied: "node_address_denied",
} as const;
export type NodeAddressRule = (typeof NODE_ADDRESS_RULES)[keyof typeof NODE_ADDRESS_RULES];

/** One refused address: the rule, and a sentence for the operator. */
export interface NodeAddressRefusal {
  rule: NodeAddressRule;
  message: string;
}

/** The gateway's own host, in every address form a URL or a resolver can give. */
export const LOOPBACK_NODE_CIDRS: readonly string[] = ["127.0.0.0/8", "::1/128"];
/** Unspecified addresses: connecting to one reaches the local host on Linux and macOS. */
export const UNSPECIFIED_NODE_CIDRS: readonly string[] = ["0.0.0.0/8", "::/128"];

/**
 * Refused unless the operator allows them: link-local ranges, which hold the cloud metadata
 * services (169.254.169.254 on AWS, GCP and Azure; fd00:ec2::254 on AWS IPv6), and Alibaba's
 * metadata address.
 */
export const METADATA_NODE_CIDRS: readonly string[] = [
  "169.254.0.0/16",
  "fe80::/10",
  "fd00:ec2::254/128",
  "100.100.100.200/32",
];

/** Every range refused unless the operator allows it. */
export const DEFAULT_DENIED_NODE_CIDRS: readonly string[] = [
  ...METADATA_NODE_CIDRS,
  ...LOOPBACK_NODE_CIDRS,
  ...UNSPECIFIED_NODE_CIDRS,
];

/** Host names that resolve to a metadata service from inside a cloud. */
const METADATA_HOSTNAMES = new Set([
  "metadata",
  "metadata.google.internal",
  "metadata.goog",
  "instance-data",
  "instance-data.ec2.internal",
]);

export interface NodeAddressPolicy {
  /** Why a node may not be at this IP address, or undefined when it may. */
  refusal(address: string): NodeAddressRefusal | undefined;
}

/** The operator's lists, as CIDRs (`10.0.0.0/8`, `fd00::/8`) or single addresses. */
export interface NodeAddressRules {
  /** Always refused, whatever else says. */
  deny: readonly string[];
  /** Allowed even inside the default-denied ranges. */
  allow: readonly string[];
  /**
   * The gateway's own host may be a node (`ZML_NODE_ALLOW_LOOPBACK`): the dev stack, the
   * tests, a single host serving its own model. Unspecified addresses stay refused.
   */
  allowLoopback?: boolean;
}

/** Throws an Error naming the first entry that is not an address or a CIDR. */
export function parseCidrList(text: string | undefined): string[] {
  const entries = (text ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  for (const entry of entries) toBlockList([entry]);
  return entries;
}

function toBlockList(cidrs: readonly string[]): BlockList {
  const list = new BlockList();
  for (const cidr of cidrs) {
    const [address = "", prefix] = cidr.split("/");
    const family = isIP(address);
    const bits = prefix === undefined ? (family === 6 ? 128 : 32) : Number(prefix);
    const max = family === 6 ? 128 : 32;
    if (family === 0 || !Number.isInteger(bits) || bits < 0 || bits > max) {
      throw new Error(`'${cidr}' is not an IP address or CIDR`);
    }
    list.addSubnet(address, bits, family === 6 ? "ipv6" : "ipv4");
  }
  return list;
}

/**
 * Operator deny, then operator allow (and the loopback allowance), then the default deny;
 * anything else is allowed. IPv4-mapped IPv6 addresses (`::ffff:127.0.0.1`, which a URL
 * spells `::ffff:7f00:1`) match the IPv4 ranges.
 */
export function createNodeAddressPolicy(rules: NodeAddressRules): NodeAddressPolicy {
  const deny = toBlockList(rules.deny);
  const allow = toBlockList([...rules.allow, ...(rules.allowLoopback ? LOOPBACK_NODE_CIDRS : [])]);
  const metadata = toBlockList(METADATA_NODE_CIDRS);
  const loopback = toBlockList(LOOPBACK_NODE_CIDRS);
  const unspecified = toBlockList(UNSPECIFIED_NODE_CIDRS);
  return {
    refusal(address) {
      const family = isIP(address) === 6 ? "ipv6" : "ipv4";
      if (deny.check(address, family)) {
        return { rule: NODE_ADDRESS_RULES.denied, message: `${address} is denied by the operator` };
      }
      if (allow.check(address, family)) return undefined;
      if (metadata.check(address, family)) {
        return {
          rule: NODE_ADDRESS_RULES.metadata,
          message: `${address} is link-local or a cloud metadata address`,
        };
      }
      if (loopback.check(address, family)) {
        return {
          rule: NODE_ADDRESS_RULES.loopback,
          message: `${address} is a loopback address: the gateway's own host is not a node (ZML_NODE_ALLOW_LOOPBACK=true allows it)`,
        };
      }
      if (unspecified.check(address, family)) {
        return {
          rule: NODE_ADDRESS_RULES.unspecified,
          message: `${address} is an unspecified address, which reaches the gateway's own host: give the node's own address`,
        };
      }
      return undefined;
    },
  };
}

/**
 * `localhost` and every name under it are the local host (RFC 6761); some resolvers answer
 * them without DNS, so they are judged by name, as the loopback addresses both families give.
 */
export function isLocalhostName(host: string): boolean {
  const name = host.toLowerCase().replace(/\.$/, "");
  return name === "localhost" || name.endsWith(".localhost");
}

/**
 * Why a host (an IP address, or a name before any DNS) is refused, or undefined when it is
 * not, or not yet: an ordinary name is judged by the addresses it resolves to, at connect
 * time. Brackets of an IPv6 URL host are allowed.
 */
export function hostRefusal(
  hostWithBrackets: string,
  policy: NodeAddressPolicy,
): NodeAddressRefusal | undefined {
  const host = hostWithBrackets.replace(/^\[|\]$/g, "").toLowerCase();
  if (isIP(host) !== 0) return policy.refusal(host);
  if (METADATA_HOSTNAMES.has(host.replace(/\.$/, ""))) {
    return { rule: NODE_ADDRESS_RULES.metadata, message: `${host} is a cloud metadata host` };
  }
  if (isLocalhostName(host)) {
    const refused = policy.refusal("127.0.0.1") ?? policy.refusal("::1");
    if (refused === undefined) return undefined;
    return refused.rule === NODE_ADDRESS_RULES.loopback
      ? {
          rule: refused.rule,
          message: `${host} is the gateway's own host, not a node (ZML_NODE_ALLOW_LOOPBACK=true allows it)`,
        }
      : { rule: refused.rule, message: `${host} is a loopback name: ${refused.message}` };
  }
  return undefined;
}

/**
 * What is wrong with a node endpoint before any DNS, with its code: `invalid_request` for the
 * scheme and credentials in the URL (they belong in `auth.secret_ref`); a
 * {@link NODE_ADDRESS_RULES} code for metadata host names, `localhost` names and literal
 * addresses the policy refuses, in any spelling a URL accepts (`2130706433`, `0x7f.1`,
 * `127.1`, `[::ffff:127.0.0.1]`): the URL parser normalises them to the address first.
 * Undefined when nothing is.
 */
export function endpointProblem(
  endpoint: string,
  policy: NodeAddressPolicy,
): { code: "invalid_request" | NodeAddressRule; message: string } | undefined {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    return { code: "invalid_request", message: "not a URL" };
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return { code: "invalid_request", message: "must be http or https" };
  }
  if (url.username !== "" || url.password !== "") {
    return {
      code: "invalid_request",
      message:
        "must not carry credentials: put them in the secrets file and name them in auth.secret_ref",
    };
  }
  const refused = hostRefusal(url.hostname, policy);
  return refused === undefined ? undefined : { code: refused.rule, message: refused.message };
}

/** A comma-separated CIDR list in a service's environment (`ZML_NODE_ALLOW_CIDRS`, …). */
export const CidrListSetting = z
  .string()
  .optional()
  .transform((text, ctx) => {
    try {
      return parseCidrList(text);
    } catch (error) {
      ctx.addIssue({ code: "custom", message: (error as Error).message });
      return z.NEVER;
    }
  });

/**
 * The settings of the node address policy, the same in every reader (intake's admin API,
 * `zml apply`, the dispatcher, the health aggregator), so one environment means one policy.
 */
export const NODE_ADDRESS_CONFIG_SHAPE = {
  /**
   * Node addresses allowed beyond the defaults (comma-separated CIDRs): link-local, metadata,
   * loopback and unspecified ranges are refused unless allowed here.
   */
  ZML_NODE_ALLOW_CIDRS: CidrListSetting,
  /** Node addresses always refused, whatever is allowed (comma-separated CIDRs). */
  ZML_NODE_DENY_CIDRS: CidrListSetting,
  /**
   * `true`: nodes may be on the gateway's own host (127.0.0.0/8, ::1, `localhost`), as in the
   * dev stack and the tests. Off by default: a node there reaches the gateway's own ports.
   */
  ZML_NODE_ALLOW_LOOPBACK: z.stringbool().default(false),
};

/**
 * The node address policy of an environment read outside a service's config (`zml apply`).
 * Throws an Error listing every setting that is wrong.
 */
export function nodeAddressPolicyFromEnv(
  env: Record<string, string | undefined>,
): NodeAddressPolicy {
  const parsed = z.object(NODE_ADDRESS_CONFIG_SHAPE).safeParse(env);
  if (!parsed.success) {
    throw new Error(parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));
  }
  return nodeAddressPolicyOf(parsed.data);
}

/** The node address policy of a service's parsed settings. */
export function nodeAddressPolicyOf(config: {
  ZML_NODE_ALLOW_CIDRS: readonly string[];
  ZML_NODE_DENY_CIDRS: readonly string[];
  ZML_NODE_ALLOW_LOOPBACK: boolean;
}): NodeAddressPolicy {
  return createNodeAddressPolicy({
    allow: config.ZML_NODE_ALLOW_CIDRS,
    deny: config.ZML_NODE_DENY_CIDRS,
    allowLoopback: config.ZML_NODE_ALLOW_LOOPBACK,
  });
}
