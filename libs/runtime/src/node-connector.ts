// The connector every node connection goes through (dispatcher calls, health probes): it
// applies the node address policy to the address actually dialled, after DNS, so a name that
// resolves (or is re-pointed) to a loopback, metadata or denied address is refused at connect
// time, not only at registration.
import { lookup as dnsLookup } from "node:dns";
import type { LookupFunction } from "node:net";
import { hostRefusal } from "@zml/contracts";
import type { NodeAddressPolicy, NodeAddressRefusal, NodeAddressRule } from "@zml/contracts";
import { buildConnector } from "undici";

/** A connection refused by the node address policy; fails the attempt like a network error. */
export class NodeAddressRefusedError extends Error {
  readonly code = "ZML_NODE_ADDRESS_REFUSED";
  /** Which rule refused it (`node_address_loopback`, …), for metrics and logs. */
  readonly rule: NodeAddressRule;
  constructor(refusal: NodeAddressRefusal) {
    super(`node address refused: ${refusal.message}`);
    this.name = "NodeAddressRefusedError";
    this.rule = refusal.rule;
  }
}

/** A resolved address of a host name, as `dns.lookup` gives it. */
export interface ResolvedAddress {
  address: string;
  family: number;
}

/**
 * Resolves a host name to every address it has. The port through which the guard learns
 * what a name points at: the system resolver in services, a fixed table in tests (a name
 * that resolves to 127.0.0.1 without touching the machine's DNS).
 */
export type HostResolver = (
  hostname: string,
  options: { family?: number | undefined; hints?: number | undefined },
) => Promise<ResolvedAddress[]>;

/** `dns.lookup` with `all: true`: getaddrinfo, as every Node client resolves by default. */
export const systemResolver: HostResolver = (hostname, options) =>
  new Promise((resolve, reject) => {
    dnsLookup(
      hostname,
      {
        all: true,
        family: options.family ?? 0,
        ...(options.hints ? { hints: options.hints } : {}),
      },
      (err, addresses) => (err ? reject(err) : resolve(addresses)),
    );
  });

/**
 * A `lookup` for sockets that refuses a name the policy refuses by name (`localhost`,
 * metadata hosts) and any answer the policy refuses: one refused address refuses the name,
 * or a socket could be steered to it by address selection.
 */
export function guardedLookup(
  policy: NodeAddressPolicy,
  resolve: HostResolver = systemResolver,
): LookupFunction {
  return (hostname, options, callback) => {
    const byName = hostRefusal(hostname, policy);
    if (byName) return callback(new NodeAddressRefusedError(byName), "", 0);
    resolve(hostname, { family: numericFamily(options.family), hints: options.hints }).then(
      (addresses) => {
        const refused = addresses.map((a) => policy.refusal(a.address)).find(Boolean);
        if (refused) return callback(new NodeAddressRefusedError(refused), "", 0);
        const first = addresses[0];
        if (first === undefined) {
          const none = Object.assign(new Error(`no address for ${hostname}`), {
            code: "ENOTFOUND",
          });
          return callback(none, "", 0);
        }
        if (options.all) {
          return (callback as (e: null, a: ResolvedAddress[]) => void)(null, addresses);
        }
        callback(null, first.address, first.family);
      },
      (err: NodeJS.ErrnoException) => callback(err, "", 0),
    );
  };
}

/** `lookup` options may name the family as `IPv4` / `IPv6` as well as 4 / 6. */
function numericFamily(family: number | string | undefined): number | undefined {
  if (family === "IPv4") return 4;
  if (family === "IPv6") return 6;
  return typeof family === "number" ? family : undefined;
}

/**
 * An undici connector that refuses literal addresses and `localhost` names the policy
 * refuses (a literal never reaches a lookup) and resolves every other name through
 * {@link guardedLookup}.
 */
export function guardedConnector(
  policy: NodeAddressPolicy,
  options: buildConnector.BuildOptions = {},
  resolve: HostResolver = systemResolver,
): buildConnector.connector {
  const connect = buildConnector({ ...options, lookup: guardedLookup(policy, resolve) });
  return (opts, callback) => {
    const refused = hostRefusal(opts.hostname, policy);
    if (refused) return callback(new NodeAddressRefusedError(refused), null);
    return connect(opts, callback);
  };
}
