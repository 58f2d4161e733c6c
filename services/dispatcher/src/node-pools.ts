import type { NodeSpec } from "@zml/contracts";
import { Pool } from "undici";

/**
 * Keep-alive connection pools, one per node, replaced when a node's endpoint or capacity
 * changes. A pool holds at least as many connections as the node takes requests at once:
 * a smaller pool would queue admitted requests inside the client, invisible to routing.
 */
export interface NodePools {
  get(node: NodeSpec): Pool;
  /** The node's base path joined with the client's OpenAI path. */
  pathFor(node: NodeSpec, clientPath: string): string;
  close(): Promise<void>;
}

export function createNodePools(options: {
  /** Floor on connections per node. */
  connections: number;
  connectTimeoutMs: number;
}): NodePools {
  const pools = new Map<string, { endpoint: string; size: number; pool: Pool }>();
  const basePaths = new Map<string, string>();
  return {
    get(node) {
      const size = Math.max(options.connections, node.max_concurrency);
      const existing = pools.get(node.id);
      if (existing?.endpoint === node.endpoint && existing.size === size) return existing.pool;
      if (existing) void existing.pool.close();
      const pool = new Pool(new URL(node.endpoint).origin, {
        connections: size,
        connect: { timeout: options.connectTimeoutMs },
        keepAliveTimeout: 30_000,
      });
      pools.set(node.id, { endpoint: node.endpoint, size, pool });
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
