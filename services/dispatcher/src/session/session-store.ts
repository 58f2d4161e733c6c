// Tier-4 sessions in memory: the `zml_sessions` bucket watched into a map, plus this
// replica's own writes until the watch has caught up with them, so a session this replica
// just opened, ended or deleted reads back at once.
import { decodeJson, encodeJson } from "@zml/bus";
import type { KV, KvMap } from "@zml/bus";
import { isSessionId, SESSIONS_BUCKET, SessionSchema } from "@zml/contracts";
import type { Session, SessionEndReason } from "@zml/contracts";

export interface SessionStore {
  /** Memory only: the decision path never waits for the network. */
  get(id: string): Session | undefined;
  /**
   * {@link get}, then, on a miss, one KV read: a session another replica opened a moment ago
   * may not have reached this replica's watch yet. Ids that are not issued ids never go to KV.
   */
  lookup(id: string): Promise<Session | undefined>;
  /** Stores a new session; rejects if the id exists. */
  create(session: Session): Promise<void>;
  /** Marks the session ended (owner's delete or node failure); returns the stored value. */
  end(session: Session, reason: SessionEndReason, detail: string, now: number): Promise<Session>;
  /**
   * Deletes sessions that ended or expired more than `retentionMs` ago. Until then they
   * answer with a precise error (`session_expired`, `session_node_unavailable`).
   */
  sweep(now: number, retentionMs: number): Promise<number>;
}

interface Local {
  session: Session | undefined;
  revision: number;
}

export function createSessionStore(
  kv: Pick<KV, "get" | "create" | "put" | "delete">,
  watched: KvMap<Session>,
): SessionStore {
  const local = new Map<string, Local>();
  const keyOf = (id: string) => `${SESSIONS_BUCKET}.${id}`;

  const get = (id: string): Session | undefined => {
    const own = local.get(id);
    if (own !== undefined) {
      // Revisions are per bucket: once the watch is at or past our write, it is the truth.
      if (watched.revision() < own.revision) return own.session;
      local.delete(id);
    }
    return watched.map.get(id);
  };

  const write = async (session: Session): Promise<Session> => {
    const revision = await kv.put(
      session.session_id,
      encodeJson(keyOf(session.session_id), SessionSchema, session),
    );
    local.set(session.session_id, { session, revision });
    return session;
  };

  return {
    get,

    async lookup(id) {
      const known = get(id);
      if (known !== undefined || !isSessionId(id)) return known;
      const entry = await kv.get(id);
      if (entry === null || entry.operation !== "PUT") return undefined;
      let session: Session;
      try {
        session = decodeJson(keyOf(id), SessionSchema, entry.value);
      } catch {
        return undefined;
      }
      if (watched.revision() < entry.revision) local.set(id, { session, revision: entry.revision });
      return session;
    },

    async create(session) {
      const revision = await kv.create(
        session.session_id,
        encodeJson(keyOf(session.session_id), SessionSchema, session),
      );
      local.set(session.session_id, { session, revision });
    },

    end(session, reason, detail, now) {
      return write({ ...session, ended: { at: now, reason_code: reason, reason: detail } });
    },

    async sweep(now, retentionMs) {
      const stale = [...watched.map.values()].filter(
        (s) => Math.min(s.ended?.at ?? Infinity, s.expires_at) + retentionMs <= now,
      );
      await Promise.all(stale.map((s) => kv.delete(s.session_id)));
      return stale.length;
    },
  };
}
