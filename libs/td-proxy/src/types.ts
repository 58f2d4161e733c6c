/** What the TD proxy logs through (pino's shape). Never given a body or a key. */
export interface TdProxyLogger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
}

/** Counters for tests and operators (`stats()`). */
export interface TdProxyStats {
  quotes_served: number;
  /** Session keys held now. */
  session_keys: number;
  /** Sealed requests that opened. */
  sealed_opened: number;
  /** Requests refused, by error code. */
  refused: Record<string, number>;
  /** Calls made to the TD's own inference server. */
  server_calls: number;
  /** Plain requests passed to the server (tier 3 only). */
  plaintext_forwarded: number;
}
