import { createHash } from "node:crypto";
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { SimEngineStats, SimLastRequest, SimStats } from "./types.ts";

/** The node's own state that the stats report beside the ledger's counts. */
export interface LedgerSources {
  nodeId: string;
  instanceId: string;
  /** Requests generating now and queued for it (the gate's, or the engine's). */
  load(): { running: number; waiting: number };
  /** The engine's counters; undefined: a node without engine model. */
  engine(): SimEngineStats | undefined;
  /** Quotes served so far; undefined: not a TEE node. */
  quotesServed(): number | undefined;
  /** SHA-256 of the key the TLS server presents now; undefined: a plain-HTTP node. */
  servedTlsKey(): string | undefined;
}

/** What the node received and answered: the counts of `GET /_sim/stats`. */
export interface RequestLedger {
  /**
   * Counts an inference payload received in full, in flight until `res` closes. `tlsKey`:
   * the key its connection was opened with (TLS nodes).
   */
  received(
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    body: Buffer,
    tlsKey: string | undefined,
  ): void;
  /** Counts a request answered in full with a 200. */
  completed(): void;
  stats(): SimStats;
  /** Zeroes the received and completed counts and forgets the last request. */
  reset(): void;
}

export function createRequestLedger(sources: LedgerSources): RequestLedger {
  let payloadsReceived = 0;
  let payloadsByVersion: Record<string, number> = {};
  const payloadsByKey: Record<string, number> = {};
  let inFlight = 0;
  let completed = 0;
  // The last body is kept as received and hashed only when someone asks for stats.
  let last: {
    path: string;
    headers: IncomingHttpHeaders;
    body: Buffer;
    httpVersion: string;
  } | null = null;
  let lastSummary: SimLastRequest | null = null;

  return {
    received(req, res, path, body, tlsKey) {
      payloadsReceived += 1;
      payloadsByVersion[req.httpVersion] = (payloadsByVersion[req.httpVersion] ?? 0) + 1;
      if (tlsKey !== undefined) payloadsByKey[tlsKey] = (payloadsByKey[tlsKey] ?? 0) + 1;
      last = { path, headers: req.headers, body, httpVersion: req.httpVersion };
      lastSummary = null;
      inFlight += 1;
      res.once("close", () => {
        inFlight -= 1;
      });
    },
    completed() {
      completed += 1;
    },
    stats() {
      if (last !== null && lastSummary === null) {
        lastSummary = {
          path: last.path,
          headers: visibleHeaders(last.headers),
          body_sha256: createHash("sha256").update(last.body).digest("hex"),
          http_version: last.httpVersion,
        };
      }
      const quotesServed = sources.quotesServed();
      const load = sources.load();
      const engine = sources.engine();
      const tlsKey = sources.servedTlsKey();
      return {
        node_id: sources.nodeId,
        instance_id: sources.instanceId,
        payloads_received: payloadsReceived,
        in_flight: inFlight,
        running: load.running,
        waiting: load.waiting,
        completed,
        last_request: last === null ? null : lastSummary,
        payloads_by_http_version: { ...payloadsByVersion },
        ...(quotesServed === undefined ? {} : { quotes_served: quotesServed }),
        ...(tlsKey === undefined
          ? {}
          : { tls_key_sha256: tlsKey, payloads_by_tls_key: { ...payloadsByKey } }),
        ...(engine === undefined ? {} : { engine }),
      };
    },
    reset() {
      payloadsReceived = 0;
      payloadsByVersion = {};
      completed = 0;
      last = null;
      lastSummary = null;
    },
  };
}

/** Headers as received, minus credentials, so tests can look at them without leaking any. */
function visibleHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const visible: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || name === "authorization" || name === "proxy-authorization") {
      continue;
    }
    visible[name] = value;
  }
  return visible;
}
