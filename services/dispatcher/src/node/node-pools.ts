import { connect as connectSocket } from "node:net";
import { hostRefusal, isTeeTier } from "@zml/contracts";
import type { NodeAddressPolicy, NodeSpec } from "@zml/contracts";
import {
  guardedConnector,
  guardedLookup,
  NodeAddressRefusedError,
  systemResolver,
} from "@zml/runtime";
import type { HostResolver } from "@zml/runtime";
import { Pool } from "undici";
import type { buildConnector } from "undici";
import { Http1Pool } from "./http1/http1-pool.ts";
import type { Http1PoolOptions, NodeDispatcher } from "./http1/http1-pool.ts";
import { pinnedConnector } from "./pinned-connector.ts";

/** Where tier 3/4 pools learn the attested TLS key to pin, and report one that differs. */
export interface TlsPins {
  /**
   * SHA-256 of the TLS key the node's usable attestation binds, for this spec's endpoint;
   * undefined when there is none (every connection is then refused).
   */
  pinFor(node: NodeSpec): string | undefined;
  onMismatch(nodeId: string, seen: string | null): void;
}

/**
 * Keep-alive connection pools, one per node, replaced when a node's endpoint, capacity or
 * (tier 3/4) pinned TLS key changes, so no connection made under an old key is reused. A
 * pool holds at least as many connections as the node takes requests at once: a smaller
 * pool would queue admitted requests inside the client, invisible to routing.
 *
 * A plain-HTTP/1.1 node (tiers 1–2, `protocol: http1`, an `http:` endpoint) gets this
 * service's own pool (http1/http1-pool.ts), which reads a streamed answer for less CPU per
 * token; TLS and HTTP/2 nodes get undici's.
 */
export interface NodePools {
  get(node: NodeSpec): NodeDispatcher;
  /** The node's base path joined with the client's OpenAI path. */
  pathFor(node: NodeSpec, clientPath: string): string;
  close(): Promise<void>;
}

export function createNodePools(options: {
  /** Floor on connections per node. */
  connections: number;
  connectTimeoutMs: number;
  pins: TlsPins;
  /** Applied to every address dialled, after DNS. */
  nodeAddresses: NodeAddressPolicy;
  /** Where node names are resolved; the system resolver unless a test fixes the answers. */
  resolveHost?: HostResolver;
}): NodePools {
  const timeout = options.connectTimeoutMs;
  const policy = options.nodeAddresses;
  const resolve = options.resolveHost ?? systemResolver;
  const guarded = (o: buildConnector.BuildOptions) => guardedConnector(policy, o, resolve);
  // The same policy for the plain-HTTP/1.1 pool's sockets: a literal address the policy
  // refuses never dials, and a name is resolved and checked by the guarded lookup.
  const lookup = guardedLookup(policy, resolve);
  const guardedDial: Http1PoolOptions["dial"] = ({ host, port, onread }) => {
    const refused = hostRefusal(host, policy);
    if (refused) throw new NodeAddressRefusedError(refused);
    return connectSocket({ host, port, onread, lookup });
  };
  // Every connector goes through the node address policy. `h2` offers HTTP/2 by ALPN (the
  // node may still pick HTTP/1.1); `h2c` speaks HTTP/2 on a plain socket from the start;
  // `http1` offers only HTTP/1.1 (undici's connector would offer h2 by ALPN by default).
  const plain = {
    http1: guarded({ timeout, allowH2: false }),
    h2: guarded({ timeout, allowH2: true }),
    h2c: guarded(withH2c({ timeout })),
  };
  // Tier 3/4: any certificate (the quote vouches for the key) and no session resumption, so
  // every connection shows the key the pinned connector checks.
  const teeOptions = { timeout, rejectUnauthorized: false, maxCachedSessions: 0 };
  const tls = {
    http1: guarded({ ...teeOptions, allowH2: false }),
    h2: guarded({ ...teeOptions, allowH2: true }),
    h2c: guarded(withH2c(teeOptions)),
  };
  /**
   * A pool for `node`: this service's own for plain HTTP/1.1, undici's otherwise; `pin`, for
   * a tier 3/4 node, the key its connections must show.
   */
  const newPool = (
    node: NodeSpec,
    size: number,
    pin: string | undefined,
    protocol: keyof typeof plain,
  ): NodeDispatcher => {
    const origin = new URL(node.endpoint).origin;
    if (pin === undefined && protocol === "http1" && origin.startsWith("http:")) {
      return new Http1Pool({
        origin,
        connections: size,
        connectTimeoutMs: timeout,
        keepAliveTimeoutMs: KEEP_ALIVE_MS,
        dial: guardedDial,
      });
    }
    const connect =
      pin !== undefined
        ? pinnedConnector({
            nodeId: node.id,
            // Checked again at each connect: the attestation may have changed since.
            pin: () => {
              const now = options.pins.pinFor(node);
              return now === pin ? now : undefined;
            },
            onMismatch: (nodeId, seen) => options.pins.onMismatch(nodeId, seen),
            timeoutMs: timeout,
            base: tls[protocol],
          })
        : plain[protocol];
    return new Pool(origin, {
      connections: size,
      connect,
      keepAliveTimeout: KEEP_ALIVE_MS,
      // HTTP/1.1 nodes are never offered h2: an operator declares what a node speaks.
      allowH2: protocol !== "http1",
      // One stream per request the node takes at once, as HTTP/1.1 has one socket each.
      ...(protocol === "http1" ? {} : { maxConcurrentStreams: node.max_concurrency }),
    });
  };
  const pools = new Map<
    string,
    { endpoint: string; size: number; pin: string; protocol: string; pool: NodeDispatcher }
  >();
  const basePaths = new Map<string, string>();
  return {
    get(node) {
      const size = Math.max(options.connections, node.max_concurrency);
      const tee = isTeeTier(node.tier);
      const pin = tee ? (options.pins.pinFor(node) ?? "none") : "";
      const protocol = node.protocol ?? "http1";
      const existing = pools.get(node.id);
      if (
        existing?.endpoint === node.endpoint &&
        existing.size === size &&
        existing.pin === pin &&
        existing.protocol === protocol
      ) {
        return existing.pool;
      }
      if (existing) void existing.pool.close();
      const pool = newPool(node, size, tee ? pin : undefined, protocol);
      pools.set(node.id, { endpoint: node.endpoint, size, pin, protocol, pool });
      return pool;
    },
    pathFor(node, clientPath) {
      let base = basePaths.get(node.endpoint);
      if (base === undefined) {
        base = new URL(node.endpoint).pathname.replace(/\/+$/, "");
        basePaths.set(node.endpoint, base);
      }
      return base + clientPath;
    },
    async close() {
      await Promise.all([...pools.values()].map((p) => p.pool.close()));
      pools.clear();
    },
  };
}

/** How long an idle connection to a node is kept (less when the node says it keeps it less). */
const KEEP_ALIVE_MS = 30_000;

/** undici's connector option for h2c (prior knowledge), missing from its type definitions. */
function withH2c(options: buildConnector.BuildOptions): buildConnector.BuildOptions {
  const h2c: Record<string, unknown> = { ...options, useH2c: true };
  return h2c;
}
