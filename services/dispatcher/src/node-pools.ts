import type { NodeSpec } from "@zml/contracts";
import { Pool } from "undici";

/** Keep-alive connection pools, one per node, replaced when a node's endpoint changes. */
export interface NodePools {
  get(node: NodeSpec): Pool;
  /** The node's base path joined with the client's OpenAI path. */
  pathFor(node: NodeSpec, clientPath: string): string;
  close(): Promise<void>;
}

export function createNodePools(options: {
  connections: number;
  connectTimeoutMs: number;
}): NodePools {
  const pools = new Map<string, { endpoint: string; pool: Pool }>();
  const basePaths = new Map<string, string>();
  return {
    get(node) {
      const existing = pools.get(node.id);
      if (existing?.endpoint === node.endpoint) return existing.pool;
      if (existing) void existing.pool.close();
      const pool = new Pool(new URL(node.endpoint).origin, {
        connections: options.connections,
        connect: { timeout: options.connectTimeoutMs },
        keepAliveTimeout: 30_000,
      });
      pools.set(node.id, { endpoint: node.endpoint, pool });
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
