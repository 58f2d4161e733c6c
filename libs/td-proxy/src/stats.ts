import type { TdProxyStats } from "./types.ts";

export class ProxyCounters {
  quotes = 0;
  opened = 0;
  serverCalls = 0;
  plaintext = 0;
  private readonly refusals: Record<string, number> = {};

  refused(code: string): void {
    this.refusals[code] = (this.refusals[code] ?? 0) + 1;
  }

  snapshot(sessionKeys: number): TdProxyStats {
    return {
      quotes_served: this.quotes,
      session_keys: sessionKeys,
      sealed_opened: this.opened,
      refused: { ...this.refusals },
      server_calls: this.serverCalls,
      plaintext_forwarded: this.plaintext,
    };
  }
}
