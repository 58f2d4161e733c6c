/**
 * Whether the in-memory copy of the accounts (the key store) can be trusted right now.
 *
 * Accounts are watched from NATS KV into memory, so a lookup never touches the network.
 * The copy is trusted once the initial load finished, while the bus is connected, and for
 * `maxStaleMs` after it disconnects (updates could be missed from then on). Outside that
 * window a presented key cannot be judged either way: intake answers 503
 * `key_store_unavailable`, never 401, so an outage never looks like a bad key to clients.
 */
export interface KeyStoreStatus {
  available(now: number): boolean;
  /** The initial load of the accounts bucket completed. */
  markLoaded(): void;
  /** The bus went down or came back at `now`. */
  connectionChanged(connected: boolean, now: number): void;
}

export function createKeyStoreStatus(maxStaleMs: number): KeyStoreStatus {
  let loaded = false;
  let disconnectedAt: number | null = null;
  return {
    available(now) {
      if (!loaded) return false;
      return disconnectedAt === null || now - disconnectedAt < maxStaleMs;
    },
    markLoaded() {
      loaded = true;
    },
    connectionChanged(connected, now) {
      if (connected) disconnectedAt = null;
      else disconnectedAt ??= now;
    },
  };
}
