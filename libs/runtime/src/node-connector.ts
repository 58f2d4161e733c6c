// The connector every node connection goes through (dispatcher calls, health probes): it
// applies the node address policy to the address actually dialled, after DNS, so a name that
// resolves (or is re-pointed) to a metadata or denied address is refused at connect time, not
// only at registration.
import { lookup as dnsLookup } from "node:dns";
import type { LookupFunction } from "node:net";
import { isIP } from "node:net";
import type { NodeAddressPolicy } from "@zml/contracts";
import { buildConnector } from "undici";

/** A connection refused by the node address policy; fails the attempt like a network error. */
export class NodeAddressRefusedError extends Error {
  readonly code = "ZML_NODE_ADDRESS_REFUSED";
  constructor(reason: string) {
    super(`node address refused: ${reason}`);
    this.name = "NodeAddressRefusedError";
  }
}

/** `dns.lookup` that refuses any answer the policy refuses. */
export function guardedLookup(policy: NodeAddressPolicy): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, "", 0);
      const refused = addresses.map((a) => policy.refusal(a.address)).find(Boolean);
      if (refused) return callback(new NodeAddressRefusedError(refused), "", 0);
      if (options.all) return (callback as (e: null, a: typeof addresses) => void)(null, addresses);
      const first = addresses[0]!;
      callback(null, first.address, first.family);
    });
  };
}

/**
 * An undici connector that refuses literal addresses the policy refuses (those never reach a
 * lookup) and resolves names through {@link guardedLookup}.
 */
export function guardedConnector(
  policy: NodeAddressPolicy,
  options: buildConnector.BuildOptions = {},
): buildConnector.connector {
  const connect = buildConnector({ ...options, lookup: guardedLookup(policy) });
  return (opts, callback) => {
    const host = opts.hostname.replace(/^\[|\]$/g, "");
    const refused = isIP(host) === 0 ? undefined : policy.refusal(host);
    if (refused) return callback(new NodeAddressRefusedError(refused), null);
    return connect(opts, callback);
  };
}
