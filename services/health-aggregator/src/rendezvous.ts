/**
 * Rendezvous (highest-random-weight) hashing: every replica scores every key and the highest
 * score owns it. All replicas that agree on the replica set agree on every owner without
 * talking to each other, and when a replica leaves only its own keys move — each to the
 * replica that scored second for it — so the others keep polling what they polled.
 */

/**
 * The replica that owns `key` among `replicas`, or `undefined` when there are none. The
 * result does not depend on the order of `replicas` or on duplicates in it.
 */
export function rendezvousOwner(key: string, replicas: Iterable<string>): string | undefined {
  let owner: string | undefined;
  let best = -1;
  for (const replica of replicas) {
    const score = weight(replica, key);
    // Ties (rare: 32-bit scores) go to the smaller id so every replica breaks them alike.
    if (score > best || (score === best && owner !== undefined && replica < owner)) {
      owner = replica;
      best = score;
    }
  }
  return owner;
}

/** The keys among `keys` that `self` owns when `replicas` are live. */
export function ownedKeys(
  self: string,
  keys: Iterable<string>,
  replicas: readonly string[],
): Set<string> {
  const owned = new Set<string>();
  for (const key of keys) if (rendezvousOwner(key, replicas) === self) owned.add(key);
  return owned;
}

/** FNV-1a over `replica \0 key` with murmur3's finaliser, so similar ids spread evenly. */
function weight(replica: string, key: string): number {
  let h = 0x811c9dc5;
  const text = `${replica}\u0000${key}`;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
