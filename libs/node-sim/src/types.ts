import type { KeyObject } from "node:crypto";

/**
 * Which serving framework the node imitates: it decides the metrics and small wire details.
 * `llamacpp` is llama.cpp's `llama-server` (its `llamacpp:` metrics, `/health` body, `/slots`
 * and chat wire format).
 */
export type SimFlavour = "vllm" | "tgi" | "llamacpp";

/** The flavours a node can take, for argument parsing and validation. */
export const SIM_FLAVOURS: readonly SimFlavour[] = ["vllm", "tgi", "llamacpp"];

/**
 * What a simulated node speaks: HTTP/1.1 (plain, or TLS with `tls`), `h2c` (HTTP/2 on a plain
 * socket, prior knowledge) or `h2` (HTTP/2 over TLS, chosen by ALPN). An HTTP/2 node answers
 * HTTP/1.1 on the same port too (health probes speak it), told apart by the connection
 * preface (h2c) or ALPN (h2); `payloads_by_http_version` in the stats shows which was used.
 */
export type SimProtocol = "http1" | "h2c" | "h2";
export const SIM_PROTOCOLS: readonly SimProtocol[] = ["http1", "h2c", "h2"];

/**
 * A fault the node applies to the requests it receives until it is cleared, or until it has
 * been applied `times` times (then it clears itself).
 *
 * - `status`: answer every inference request with `status` and an OpenAI error body; a 429
 *   carries `Retry-After` (`retryAfterS`, default 1), any other status only when
 *   `retryAfterS` is given.
 * - `reset`: read the request, then reset the TCP connection without answering.
 * - `hang`: read the request and never answer (the socket stays open).
 * - `slow_first_token`: add `delayMs` before the first token.
 * - `cut_stream`: send `afterChunks` SSE `data:` events, then destroy the socket (no `[DONE]`).
 *   A non-streamed request gets its headers and half its body, then the socket is destroyed.
 * - `stall_stream`: send `afterChunks` events, then send nothing more while keeping the
 *   socket open. A non-streamed request gets its headers and half its body, then stalls.
 * - `malformed_chunk`: after `afterChunks` events, send `data: {not json`, then carry on
 *   normally. A non-streamed request gets a 200 whose body is not JSON.
 * - `health_fail`: `GET /health` answers 503; inference is unaffected. `times` counts health
 *   checks.
 * - `relay` (TLS nodes): quote requests are forwarded to `target`'s quote endpoint and its
 *   answer served as this node's: a non-TEE server passing off a real TD's quotes. `times`
 *   counts quote requests.
 * - `key_swap` (TEE nodes): acts once, at once, and clears itself: the node's TLS server
 *   switches to a new key made outside the TD and drops its connections, while its quotes
 *   keep binding the TD's own key (a host that swapped the TLS terminator).
 *
 * `times` counts only requests the fault acts on: `status`, `reset` and `hang` act on every
 * inference payload received; the others only on requests that passed validation.
 */
export type SimFault =
  | { kind: "status"; status: number; retryAfterS?: number; times?: number }
  | { kind: "reset"; times?: number }
  | { kind: "hang"; times?: number }
  | { kind: "slow_first_token"; delayMs: number; times?: number }
  | { kind: "cut_stream"; afterChunks: number; times?: number }
  | { kind: "stall_stream"; afterChunks: number; times?: number }
  | { kind: "malformed_chunk"; afterChunks: number; times?: number }
  | { kind: "health_fail"; times?: number }
  | { kind: "relay"; target: string; times?: number }
  | { kind: "key_swap" };

/** The fault kinds, in the order the README documents them. */
export type SimFaultKind = SimFault["kind"];

/** Settings that can change while the node runs (`PUT /_sim/config` or `configure()`). */
export interface SimRuntimeConfig {
  /** Delay from the start of generation to the first token, in milliseconds. */
  ttftMs: number;
  /** Pace of the tokens after the first; 0 sends them all at once. */
  tokensPerSecond: number;
  /** Requests generated at the same time; the rest wait in a FIFO queue. */
  maxConcurrency: number;
  /** Tokens generated per request unless `max_tokens` / `max_completion_tokens` is smaller. */
  completionTokens: number;
}

/** One generated response, rendered either as a JSON body or as SSE events. */
export interface ResponseRender {
  /** Events of the stream, `[DONE]` excluded. */
  readonly eventCount: number;
  /** What the stream ends with after its last event: `[DONE]`, or nothing (Responses). */
  readonly terminator: string;
  /** Index of the first event that carries a token (vLLM chat sends a role-only event first). */
  readonly firstTokenEvent: number;
  /** Token index whose generation releases event `i` (events before the first token: 0). */
  tokenOfEvent(i: number): number;
  /** Event `i` as sent on the wire, `data: ...\n\n` included. */
  event(i: number): string;
  /** The non-streamed response body. */
  body(): string;
}

/** What the last inference payload looked like, for tests that check what a node saw. */
export interface SimLastRequest {
  path: string;
  /** Request headers, lowercased, without `authorization` and `proxy-authorization`. */
  headers: Record<string, string | string[]>;
  /** Hex SHA-256 of the body bytes exactly as received. */
  body_sha256: string;
  /** `1.1` or `2.0`, as the node saw the request. */
  http_version: string;
}

/** Counters tests read from `GET /_sim/stats` or `stats()`. */
export interface SimStats {
  node_id: string;
  instance_id: string;
  /** Inference payloads fully received on an inference path, whatever happened next. */
  payloads_received: number;
  /** Inference requests received and not yet answered or abandoned. */
  in_flight: number;
  /** Requests holding a generation slot. */
  running: number;
  /** Requests queued for a generation slot. */
  waiting: number;
  /** Inference requests answered in full with a 200 (streams ended with `[DONE]`). */
  completed: number;
  last_request: SimLastRequest | null;
  /** Inference payloads received per HTTP version (`1.1`, `2.0`). */
  payloads_by_http_version: Record<string, number>;
  /** TEE mode only: quotes served on `GET /attestation/quote`. */
  quotes_served?: number;
  /**
   * TLS nodes only: SHA-256 (hex) of the SPKI DER of the key the server presents now, and
   * the inference payloads received per such key hash.
   */
  tls_key_sha256?: string;
  payloads_by_tls_key?: Record<string, number>;
  /** Nodes with an engine model only. */
  engine?: SimEngineStats;
}

/** The test PCK that signs a TEE node's quotes, e.g. from `createTestPki()` of `@zml/tdx/testing`. */
export interface SimTeeSigner {
  /** PEM chain PCK leaf, PCK Platform CA, root (`TestPki.pckChainPem`). */
  pckChainPem: string;
  /** The PCK leaf's private key (`TestPki.pck.key`). */
  pckKey: KeyObject;
  /** The quoting enclave's attestation key; default: one fresh P-256 key per node. */
  attestationKey?: KeyObject;
}

/**
 * Tier 3/4 mode: the node serves HTTPS with a TLS key made inside the (simulated) TD, and
 * TDX quotes v4 in the real layout on `GET /attestation/quote?nonce=<64 hex>`, signed
 * through a test certificate chain (never Intel's), whose REPORTDATA binds the nonce and the
 * TLS key (`reportDataFor` of `@zml/tdx`); with `&session_key=1`, a fresh ephemeral X25519
 * public key is served too and bound beside the TLS key.
 */
export interface SimTeeOptions {
  signer: SimTeeSigner;
  /** 48 bytes of hex each; RTMRs default to zero. */
  mrtd: string;
  rtmr0?: string;
  rtmr1?: string;
  rtmr2?: string;
  rtmr3?: string;
  /** Sets the TD's DEBUG attribute (a production verifier must reject it). */
  debug?: boolean;
  /** Answer every request with the first quote served, ignoring the nonce (a replay attack). */
  replayQuote?: boolean;
  /** Collateral (dcap-qvl JSON, e.g. `createTestCollateral()`) served alongside each quote. */
  collateral?: Readonly<Record<string, string>>;
}

/**
 * The engine model (README, "Engine model"): the node schedules, prefills and decodes like a
 * vLLM engine with automatic prefix caching instead of pacing every request alike. Every
 * field has a default; `maxConcurrency` is the engine's `max_num_seqs`.
 */
export interface SimEngineOptions {
  /** KV-cache blocks of 16 tokens (vLLM's `num_gpu_blocks`); default 4096. */
  kvCacheBlocks?: number;
  /** Uncached prompt tokens prefilled per second, one prefill at a time; default 16000. */
  prefillTokensPerSecond?: number;
  /** A decode step's fixed time in milliseconds; default 8. */
  stepBaseMs?: number;
  /** What each running sequence adds to a decode step, in milliseconds; default 0.25. */
  stepPerSequenceMs?: number;
}

/** The engine's counters in `GET /_sim/stats` (nodes with an engine model). */
export interface SimEngineStats {
  kv_cache_blocks: number;
  cached_blocks: number;
  kv_cache_usage: number;
  /** Prompt tokens looked up in the prefix cache, and those found there. */
  prefix_cache_queries: number;
  prefix_cache_hits: number;
  prompt_tokens: number;
  generation_tokens: number;
}

/** Options of {@link startSimNode}. */
export interface SimNodeOptions {
  nodeId: string;
  flavour: SimFlavour;
  /** Model ids served; the first one labels the metrics, as vLLM does with served names. */
  models: string[];
  /**
   * What the node answers, one word per token, repeated as long as the answer runs; default a
   * fixed sentence. Lets a test find a marker of its own in an answer.
   */
  reply?: string;
  /** Default `127.0.0.1`. */
  host?: string;
  /** Default 0: a free port chosen by the system. */
  port?: number;
  /** Default 0. */
  ttftMs?: number;
  /** Default 0: instant. */
  tokensPerSecond?: number;
  /** Default 8. */
  maxConcurrency?: number;
  /** Default 16. */
  completionTokens?: number;
  /**
   * Run an engine model (vLLM flavour only): prefix caching, serial prefill, batched decode
   * and vLLM's cache metrics. `ttftMs` and `tokensPerSecond` then no longer pace answers.
   */
  engine?: SimEngineOptions;
  /** Default: a random UUID, so a restarted node at the same port can be told apart. */
  instanceId?: string;
  /** Tier 3/4 mode: serve HTTPS and TDX quotes (see {@link SimTeeOptions}). */
  tee?: SimTeeOptions;
  /**
   * Serve HTTPS with a fresh self-signed key (always on in TEE mode). Clients must not
   * expect the certificate to chain to a CA.
   */
  tls?: boolean;
  /** Default `http1`. `h2` serves TLS (a fresh self-signed key unless `certificate` is given). */
  protocol?: SimProtocol;
  /**
   * The key and certificate (PEM) a TLS node presents instead of a fresh self-signed one, e.g.
   * one for `127.0.0.1` that the client is told to trust. Not in TEE mode: there the key is
   * made inside the TD.
   */
  certificate?: { keyPem: string; certPem: string };
}

/** A running simulated node. */
export interface SimNode {
  /** Base URL, e.g. `http://127.0.0.1:41234` (`https://` for TLS nodes), no trailing slash. */
  readonly url: string;
  readonly port: number;
  readonly nodeId: string;
  readonly instanceId: string;
  stats(): SimStats;
  /** Current fault, or `null` when none is set (or the last one used up its `times`). */
  fault(): SimFault | null;
  /** Sets or clears (`null`) the fault. Throws {@link SimInputError} on an invalid fault. */
  setFault(fault: SimFault | null): void;
  /** Changes run-time settings. Throws {@link SimInputError} on an invalid patch. */
  configure(patch: Partial<SimRuntimeConfig>): void;
  /** Zeroes `payloads_received` and `completed` and forgets the last request. */
  resetStats(): void;
  /**
   * Engine nodes: evicts every cached prefix block no running request holds, as vLLM's
   * `POST /reset_prefix_cache` does. Throws {@link SimInputError} on a node without engine.
   */
  resetPrefixCache(): void;
  /** Stops listening and ends every open connection, hanging and stalled ones included. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}
