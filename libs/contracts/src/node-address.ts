// Where a node may be. A node endpoint is a URL an operator (or a stolen admin token) hands
// the gateway, which then sends prompts and credentials there and polls it: without limits it
// is a way to reach cloud metadata services and to scan the operator's network. Checked when a
// node is registered, and again when a connection is made (after DNS).
import { BlockList, isIP } from "node:net";
import { z } from "zod";

/**
 * Refused unless the operator allows them: link-local ranges, which hold the cloud metadata
 * services (169.254.169.254 on AWS, GCP and Azure; fd00:ec2::254 on AWS IPv6), and Alibaba's
 * metadata address.
 */
export const DEFAULT_DENIED_NODE_CIDRS: readonly string[] = [
  "169.254.0.0/16",
  "fe80::/10",
  "fd00:ec2::254/128",
  "100.100.100.200/32",
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
  refusal(address: string): string | undefined;
}

/** The operator's lists, as CIDRs (`10.0.0.0/8`, `fd00::/8`) or single addresses. */
export interface NodeAddressRules {
  /** Always refused, whatever else says. */
  deny: readonly string[];
  /** Allowed even inside the default-denied ranges. */
  allow: readonly string[];
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

/** Operator deny, then operator allow, then the default deny; anything else is allowed. */
export function createNodeAddressPolicy(rules: NodeAddressRules): NodeAddressPolicy {
  const deny = toBlockList(rules.deny);
  const allow = toBlockList(rules.allow);
  const defaults = toBlockList(DEFAULT_DENIED_NODE_CIDRS);
  return {
    refusal(address) {
      const family = isIP(address) === 6 ? "ipv6" : "ipv4";
      if (deny.check(address, family)) return `address ${address} is denied by the operator`;
      if (allow.check(address, family)) return undefined;
      if (defaults.check(address, family)) {
        return `address ${address} is link-local or a cloud metadata address`;
      }
      return undefined;
    },
  };
}

/**
 * What is wrong with a node endpoint before any DNS: the scheme, credentials in the URL
 * (they belong in `auth.secret_ref`), metadata host names, and literal addresses the policy
 * refuses. Undefined when nothing is.
 */
export function endpointProblem(endpoint: string, policy: NodeAddressPolicy): string | undefined {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    return "not a URL";
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return "must be http or https";
  if (url.username !== "" || url.password !== "") {
    return "must not carry credentials: put them in the secrets file and name them in auth.secret_ref";
  }
  const host = url.hostname.replace(/^\[|\]$/g, "").toLowerCase();
  if (METADATA_HOSTNAMES.has(host.replace(/\.$/, ""))) return `${host} is a cloud metadata host`;
  return isIP(host) === 0 ? undefined : policy.refusal(host);
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
