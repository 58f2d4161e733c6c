// Ending a session on its TD: the session's private key is dropped there, over the node's
// pinned connection, so nothing sealed to it can be opened again.
import { NODE_SESSION_KEYS_PATH } from "@zml/contracts";
import type { Session } from "@zml/contracts";
import type { RoutingState } from "../fleet/routing-state.ts";
import { requestNode } from "../node/node-answer.ts";
import type { NodePools } from "../node/node-pools.ts";
import { sessionKeyIdOf } from "./session-check.ts";

const DROP_TIMEOUT_MS = 5_000;

export function createSessionKeyDropper(
  pools: NodePools,
  routing: RoutingState,
): (session: Session) => Promise<void> {
  return async (session) => {
    const { snapshot } = routing.current();
    const index = snapshot.nodeIndex.get(session.node_id);
    const node = index === undefined ? undefined : snapshot.nodes[index]?.spec;
    // A node that left the fleet is not called; the key expires with the session there.
    if (node === undefined) return;
    const path = pools.pathFor(node, `${NODE_SESSION_KEYS_PATH}/${sessionKeyIdOf(session)}`);
    const res = await requestNode(pools.get(node), {
      path,
      method: "DELETE",
      headers: {},
      body: null,
      signal: AbortSignal.timeout(DROP_TIMEOUT_MS),
      headersTimeout: DROP_TIMEOUT_MS,
      bodyTimeout: DROP_TIMEOUT_MS,
    });
    await res.body.dump();
    // 404: the TD holds no such key any more (it restarted, or the key expired).
    if (res.statusCode !== 204 && res.statusCode !== 404) {
      throw new Error(`the node answered ${res.statusCode}`);
    }
  };
}
