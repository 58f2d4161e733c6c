// The TD's session keys: made on a quote request that asks for one, kept in memory only, and
// dropped when the session ends (a DELETE from the gateway), when it expires, or when the
// process stops. Nothing here is ever written anywhere. Each key holds the channels clients
// opened to it (one HPKE setup each), kept as long as the key: a channel's replay window must
// not be forgotten while its requests could still open.
import { createSessionKeyPair } from "@zml/seal";
import type { RecipientChannel, SessionKeyPair } from "@zml/seal";
import type { ReplayWindow } from "./replay-window.ts";

/** One client's channel to a session key: its HPKE context and which of its numbers opened. */
export interface ChannelState {
  channel: RecipientChannel;
  replay: ReplayWindow;
}

export interface SessionKey {
  pair: SessionKeyPair;
  expiresAt: number;
  /** By `enc` (base64url); only channels a request has opened under. */
  channels: Map<string, ChannelState>;
  /** Whether any request has opened under it (an unused key is the first to go when full). */
  used: boolean;
}

export class TooManySessionKeysError extends Error {
  constructor(max: number) {
    super(`this TD holds ${max} session keys already, all in use`);
    this.name = "TooManySessionKeysError";
  }
}

export interface SessionKeyStoreOptions {
  /** Most keys held at once; when full, the oldest unused one makes room. */
  maxKeys: number;
  clock: () => number;
}

export class SessionKeyStore {
  /** Insertion order is creation order: the oldest key comes first. */
  private readonly keys = new Map<string, SessionKey>();
  private readonly options: SessionKeyStoreOptions;

  constructor(options: SessionKeyStoreOptions) {
    this.options = options;
  }

  /** A new key that lives `ttlMs`. @throws TooManySessionKeysError */
  create(ttlMs: number): SessionKeyPair {
    const now = this.options.clock();
    this.sweep(now);
    if (this.keys.size >= this.options.maxKeys) this.evictUnused();
    const pair = createSessionKeyPair();
    this.keys.set(pair.keyId, {
      pair,
      expiresAt: now + ttlMs,
      channels: new Map(),
      used: false,
    });
    return pair;
  }

  /** The live key with this id; an expired one is dropped on the way. */
  get(keyId: string): SessionKey | undefined {
    const key = this.keys.get(keyId);
    if (key === undefined) return undefined;
    if (this.options.clock() >= key.expiresAt) {
      this.keys.delete(keyId);
      return undefined;
    }
    return key;
  }

  delete(keyId: string): boolean {
    return this.keys.delete(keyId);
  }

  /** Drops every expired key. */
  sweep(now: number): void {
    for (const [id, key] of this.keys) if (now >= key.expiresAt) this.keys.delete(id);
  }

  clear(): void {
    this.keys.clear();
  }

  get size(): number {
    return this.keys.size;
  }

  private evictUnused(): void {
    for (const [id, key] of this.keys) {
      if (!key.used) {
        this.keys.delete(id);
        return;
      }
    }
    throw new TooManySessionKeysError(this.options.maxKeys);
  }
}
