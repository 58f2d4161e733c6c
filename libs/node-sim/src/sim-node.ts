import { createHash, randomUUID } from "node:crypto";
import { NODE_QUOTE_PATH } from "@zml/contracts";
import { once } from "node:events";
import { createServer, get as createHttpGet } from "node:http";
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import {
  constants as h2,
  createSecureServer as createH2Server,
  createServer as createH2cServer,
} from "node:http2";
import type {
  Http2SecureServer,
  Http2Server,
  Http2ServerRequest,
  Http2ServerResponse,
  Http2Session,
} from "node:http2";
import { createServer as createHttpsServer, get as httpsGet } from "node:https";
import type { Server as HttpsServer } from "node:https";
import type { Server as NetServer, Socket } from "node:net";
import type { Duplex } from "node:stream";
import { createConcurrencyGate } from "./concurrency-gate.ts";
import { embeddingsBody, parseEmbeddingRequest } from "./embeddings.ts";
import { createFaultSlot } from "./fault-slot.ts";
import { createSniffingServer } from "./h2c-sniff.ts";
import { asGenerationFault, runGeneration } from "./generation.ts";
import type { GenerationContext } from "./generation.ts";
import { createSimMetrics } from "./metrics.ts";
import { errorBodyJson, parseInferenceRequest } from "./openai-request.ts";
import { createVocabulary, DEFAULT_VOCABULARY } from "./openai-response.ts";
import type { InferenceKind } from "./openai-request.ts";
import { readBody } from "./read-body.ts";
import { checkTeeOptions, createTeeQuoter, nonceOf, wantsSessionKey } from "./tee.ts";
import { createTlsIdentity, tlsIdentityOf } from "./tls-identity.ts";
import type { TlsIdentity } from "./tls-identity.ts";
import { SIM_FLAVOURS, SIM_PROTOCOLS } from "./types.ts";
import type {
  SimFault,
  SimLastRequest,
  SimNode,
  SimNodeOptions,
  SimRuntimeConfig,
  SimStats,
} from "./types.ts";
import { parseSimConfigPatch, parseSimFault, SimInputError } from "./validate.ts";

/** Inference bodies above this size are answered with 413, as a real node's proxy would. */
export const SIM_BODY_LIMIT_BYTES = 8 * 1024 * 1024;
const CONTROL_BODY_LIMIT_BYTES = 64 * 1024;

const DEFAULTS: SimRuntimeConfig = {
  ttftMs: 0,
  tokensPerSecond: 0,
  maxConcurrency: 8,
  completionTokens: 16,
};

const JSON_TYPE = "application/json";

/** The inference paths and what each one runs. */
const INFERENCE_KINDS = {
  "/v1/chat/completions": "chat",
  "/v1/completions": "completion",
  "/v1/responses": "responses",
  "/v1/embeddings": "embeddings",
} as const;
const MODEL_PATH_PREFIX = "/v1/models/";

function sendJson(
  res: ServerResponse,
  status: number,
  body: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, {
    ...headers,
    "content-type": JSON_TYPE,
    "content-length": Buffer.byteLength(body),
  });
  res.end(body);
}

function sendControlError(res: ServerResponse, error: SimInputError): void {
  const body = {
    error: {
      message: error.message,
      type: "invalid_request_error",
      param: error.field,
      code: error.code,
    },
  };
  sendJson(res, 400, JSON.stringify(body));
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

function checkOptions(options: SimNodeOptions): void {
  const fail = (field: string, message: string): never => {
    throw new SimInputError("invalid_options", `options.${field}: ${message}`, `options.${field}`);
  };
  if (typeof options.nodeId !== "string" || options.nodeId.length === 0) {
    fail("nodeId", "expected a non-empty string");
  }
  if (!SIM_FLAVOURS.includes(options.flavour)) {
    fail("flavour", `expected one of ${SIM_FLAVOURS.join(", ")}`);
  }
  if (
    !Array.isArray(options.models) ||
    options.models.length === 0 ||
    !options.models.every((m) => typeof m === "string" && m.length > 0)
  ) {
    fail("models", "expected at least one non-empty model id");
  }
  const port = options.port ?? 0;
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    fail("port", "expected an integer from 0 to 65535");
  }
  if (options.instanceId !== undefined && options.instanceId.length === 0) {
    fail("instanceId", "expected a non-empty string");
  }
  if (options.tee !== undefined) checkTeeOptions(options.tee);
  const protocol = options.protocol ?? "http1";
  if (!SIM_PROTOCOLS.includes(protocol)) {
    fail("protocol", `expected one of ${SIM_PROTOCOLS.join(", ")}`);
  }
  if (protocol === "h2c" && (options.tee !== undefined || options.tls === true)) {
    fail("protocol", "h2c is HTTP/2 without TLS; TLS and TEE nodes speak http1 or h2");
  }
  const certificate = options.certificate;
  if (certificate !== undefined) {
    if (options.tee !== undefined) fail("certificate", "a TEE node makes its own key");
    if (protocol !== "h2" && options.tls !== true) {
      fail("certificate", "only a TLS node (tls or protocol h2) presents a certificate");
    }
    if (typeof certificate.keyPem !== "string" || typeof certificate.certPem !== "string") {
      fail("certificate", "expected keyPem and certPem as PEM strings");
    }
  }
}

/**
 * node:http2's compatibility API has every member the handlers use (method, url, headers,
 * the body stream, writeHead/write/end, "close", socket.destroy, which resets the stream), so
 * they take it as the HTTP/1.1 types; what differs per protocol is handled where it is used.
 */
function asHttp1(
  req: IncomingMessage | Http2ServerRequest,
  res: ServerResponse | Http2ServerResponse,
): [IncomingMessage, ServerResponse] {
  return [req as unknown as IncomingMessage, res as unknown as ServerResponse];
}

/**
 * Starts a simulated vLLM or TGI node on `host:port` (port 0: a free one) and resolves once
 * it listens. It serves the OpenAI-compatible inference API, `/health`, `/metrics` and the
 * `/_sim/*` control API described in the README.
 *
 * @throws {SimInputError} with code `invalid_options` for bad options; rejects with the
 *   listen error (e.g. `EADDRINUSE`) when the port is taken.
 */
export async function startSimNode(options: SimNodeOptions): Promise<SimNode> {
  checkOptions(options);
  const initial = parseSimConfigPatch(
    {
      ...(options.ttftMs === undefined ? {} : { ttftMs: options.ttftMs }),
      ...(options.tokensPerSecond === undefined
        ? {}
        : { tokensPerSecond: options.tokensPerSecond }),
      ...(options.maxConcurrency === undefined ? {} : { maxConcurrency: options.maxConcurrency }),
      ...(options.completionTokens === undefined
        ? {}
        : { completionTokens: options.completionTokens }),
    },
    "options",
    "invalid_options",
  );
  const config: SimRuntimeConfig = { ...DEFAULTS, ...initial };
  const nodeId = options.nodeId;
  const flavour = options.flavour;
  const instanceId = options.instanceId ?? randomUUID();
  const models = new Set(options.models);
  const createdS = Math.floor(Date.now() / 1000);
  const modelCard = (id: string) => ({
    id,
    object: "model",
    created: createdS,
    owned_by: flavour === "vllm" ? "vllm" : "tgi",
    root: id,
    parent: null,
  });
  const modelsBody = JSON.stringify({ object: "list", data: options.models.map(modelCard) });

  const quoter = options.tee === undefined ? undefined : createTeeQuoter(options.tee);
  const protocol = options.protocol ?? "http1";
  // In TEE mode this key is made inside the TD; the quotes bind it even after a key swap.
  const tdIdentity =
    options.certificate !== undefined
      ? tlsIdentityOf(options.certificate.keyPem, options.certificate.certPem)
      : options.tee !== undefined || options.tls === true || protocol === "h2"
        ? createTlsIdentity(nodeId)
        : undefined;
  let served: TlsIdentity | undefined = tdIdentity;
  // The key each connection was opened with: its socket (HTTP/1.1) or its session (HTTP/2).
  const keyOfSocket = new WeakMap<object, string>();
  const sessions = new Set<Http2Session>();
  /** What a request arrived on: the unit a key swap or a reset ends. */
  const connectionOf = (req: IncomingMessage): object =>
    isHttp2(req) ? (req as unknown as Http2ServerRequest).stream.session! : req.socket;
  const payloadsByKey: Record<string, number> = {};
  const faults = createFaultSlot();
  const gate = createConcurrencyGate(config.maxConcurrency);
  const metrics = createSimMetrics(flavour, options.models[0] ?? "", instanceId);
  let payloadsReceived = 0;
  let payloadsByVersion: Record<string, number> = {};
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

  const ctx: GenerationContext = {
    flavour,
    config,
    gate,
    metrics,
    vocabulary: options.reply?.trim()
      ? createVocabulary(options.reply.split(" ").filter(Boolean))
      : DEFAULT_VOCABULARY,
    batchTokens: 0,
    closing: false,
    onCompleted() {
      completed += 1;
    },
  };

  function stats(): SimStats {
    if (last !== null && lastSummary === null) {
      lastSummary = {
        path: last.path,
        headers: visibleHeaders(last.headers),
        body_sha256: createHash("sha256").update(last.body).digest("hex"),
        http_version: last.httpVersion,
      };
    }
    return {
      node_id: nodeId,
      instance_id: instanceId,
      payloads_received: payloadsReceived,
      in_flight: inFlight,
      running: gate.running,
      waiting: gate.waiting,
      completed,
      last_request: last === null ? null : lastSummary,
      payloads_by_http_version: { ...payloadsByVersion },
      ...(quoter === undefined ? {} : { quotes_served: quoter.served }),
      ...(served === undefined
        ? {}
        : { tls_key_sha256: served.keySha256, payloads_by_tls_key: { ...payloadsByKey } }),
    };
  }

  function configure(patch: Partial<SimRuntimeConfig>): void {
    const checked = parseSimConfigPatch(patch);
    Object.assign(config, checked);
    if (checked.maxConcurrency !== undefined) gate.setLimit(checked.maxConcurrency);
  }

  function resetStats(): void {
    payloadsReceived = 0;
    payloadsByVersion = {};
    completed = 0;
    last = null;
    lastSummary = null;
  }

  async function handleInference(
    req: IncomingMessage,
    res: ServerResponse,
    kind: InferenceKind | "embeddings",
    path: string,
  ): Promise<void> {
    const read = await readBody(req, SIM_BODY_LIMIT_BYTES);
    if (!read.ok) {
      if (read.reason === "too_large") {
        const message = `request body exceeds ${SIM_BODY_LIMIT_BYTES} bytes`;
        // HTTP/2 has no connection header: the stream ends, the session goes on.
        const close: Record<string, string> = isHttp2(req) ? {} : { connection: "close" };
        sendJson(res, 413, errorBodyJson({ status: 413, message, param: null }), close);
      }
      return;
    }
    payloadsReceived += 1;
    payloadsByVersion[req.httpVersion] = (payloadsByVersion[req.httpVersion] ?? 0) + 1;
    const key = keyOfSocket.get(connectionOf(req));
    if (key !== undefined) payloadsByKey[key] = (payloadsByKey[key] ?? 0) + 1;
    last = { path, headers: req.headers, body: read.body, httpVersion: req.httpVersion };
    lastSummary = null;
    inFlight += 1;
    res.once("close", () => {
      inFlight -= 1;
    });

    const fault = faults.take("request");
    if (fault !== null) {
      applyRequestFault(req, res, fault);
      return;
    }
    if (kind === "embeddings") return answerEmbeddings(res, read.body);
    const parsed = parseInferenceRequest(kind, read.body, models);
    if (!("kind" in parsed)) {
      sendJson(res, parsed.status, errorBodyJson(parsed));
      return;
    }
    runGeneration(ctx, res, parsed, asGenerationFault(faults.take("generation")));
  }

  /** Embeddings take a slot like a generation and answer after time-to-first-token. */
  function answerEmbeddings(res: ServerResponse, raw: Buffer): void {
    const parsed = parseEmbeddingRequest(raw, models);
    if (!("inputs" in parsed)) {
      sendJson(res, parsed.status, errorBodyJson(parsed));
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const lease = gate.enter(() => {
      timer = setTimeout(() => {
        if (res.destroyed || ctx.closing) return;
        sendJson(res, 200, embeddingsBody(parsed));
        completed += 1;
      }, config.ttftMs);
    });
    res.once("close", () => {
      clearTimeout(timer);
      lease.release();
    });
  }

  function handleModel(res: ServerResponse, id: string): void {
    if (!models.has(id)) {
      const message = `The model \`${id}\` does not exist.`;
      sendJson(res, 404, errorBodyJson({ status: 404, message, param: "model" }));
      return;
    }
    sendJson(res, 200, JSON.stringify(modelCard(id)));
  }

  function applyRequestFault(req: IncomingMessage, res: ServerResponse, fault: SimFault): void {
    if (fault.kind === "reset") {
      // HTTP/2: the stream is reset (RST_STREAM), not the connection the others share.
      if (isHttp2(req)) {
        (req as unknown as Http2ServerRequest).stream.close(h2.NGHTTP2_INTERNAL_ERROR);
      } else if ("resetAndDestroy" in req.socket) {
        req.socket.resetAndDestroy();
      } else {
        // An HTTP/1.1 connection of an h2c node runs on a replaying stream, not a TCP socket.
        (req.socket as Duplex).destroy();
      }
    } else if (fault.kind === "status") {
      const retryAfter = fault.retryAfterS ?? (fault.status === 429 ? 1 : undefined);
      const headers: Record<string, string> =
        retryAfter === undefined ? {} : { "retry-after": String(retryAfter) };
      const message = `simulated fault on node ${nodeId}: status ${fault.status}`;
      sendJson(
        res,
        fault.status,
        errorBodyJson({ status: fault.status, message, param: null }),
        headers,
      );
    }
    // `hang`: the request was read and is never answered; close() or the client ends it.
  }

  function handleHealth(res: ServerResponse): void {
    if (faults.take("health") === null) {
      res.writeHead(200, { "content-length": 0 });
      res.end();
    } else if (flavour === "tgi") {
      sendJson(res, 503, '{"error":"unhealthy","error_type":"healthcheck"}');
    } else {
      res.writeHead(503, { "content-length": 0 });
      res.end();
    }
  }

  function handleMetrics(res: ServerResponse): void {
    const text = metrics.render({
      running: gate.running,
      waiting: gate.waiting,
      maxConcurrency: config.maxConcurrency,
      batchTokens: ctx.batchTokens,
    });
    res.writeHead(200, {
      "content-type": "text/plain; version=0.0.4; charset=utf-8",
      "content-length": Buffer.byteLength(text),
    });
    res.end(text);
  }

  async function readControlJson(
    req: IncomingMessage,
    res: ServerResponse,
    code: SimInputError["code"],
  ): Promise<{ ok: true; value: unknown } | { ok: false }> {
    const read = await readBody(req, CONTROL_BODY_LIMIT_BYTES);
    if (!read.ok) {
      if (read.reason === "too_large") {
        sendControlError(res, new SimInputError(code, "control body too large", null));
      }
      return { ok: false };
    }
    try {
      return { ok: true, value: JSON.parse(read.body.toString("utf8")) as unknown };
    } catch {
      sendControlError(res, new SimInputError(code, "body: expected JSON", null));
      return { ok: false };
    }
  }

  async function handleFault(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method === "GET") {
      sendJson(res, 200, JSON.stringify({ fault: faults.current() }));
    } else if (req.method === "DELETE") {
      faults.set(null);
      sendJson(res, 200, '{"fault":null}');
    } else if (req.method === "PUT") {
      const body = await readControlJson(req, res, "invalid_fault");
      if (!body.ok) return;
      try {
        const fault = parseSimFault(body.value);
        setFault(fault);
        sendJson(res, 200, JSON.stringify({ fault: faults.current() }));
      } catch (error) {
        if (!(error instanceof SimInputError)) throw error;
        sendControlError(res, error);
      }
    } else {
      methodNotAllowed(res);
    }
  }

  async function handleConfig(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method === "GET") {
      sendJson(res, 200, JSON.stringify({ config }));
    } else if (req.method === "PUT") {
      const body = await readControlJson(req, res, "invalid_config");
      if (!body.ok) return;
      try {
        configure(body.value as Partial<SimRuntimeConfig>);
        sendJson(res, 200, JSON.stringify({ config }));
      } catch (error) {
        if (!(error instanceof SimInputError)) throw error;
        sendControlError(res, error);
      }
    } else {
      methodNotAllowed(res);
    }
  }

  function handleQuote(req: IncomingMessage, res: ServerResponse): void {
    if (req.method !== "GET") return methodNotAllowed(res);
    const fault = faults.take("quote");
    if (fault?.kind === "relay") return relayQuote(req, res, fault.target);
    if (quoter === undefined || tdIdentity === undefined) {
      return sendJson(res, 404, '{"detail":"Not Found"}');
    }
    const nonce = nonceOf(req.url ?? "/");
    if (nonce === undefined) {
      const body = {
        error: {
          message: "nonce: expected 32 bytes of hex",
          type: "invalid_request_error",
          param: "nonce",
          code: "invalid_nonce",
        },
      };
      return sendJson(res, 400, JSON.stringify(body));
    }
    const answer = quoter.quote(nonce, {
      tlsKeySha256: tdIdentity.keySha256,
      sessionKey: wantsSessionKey(req.url ?? "/"),
    });
    sendJson(res, 200, JSON.stringify(answer), { "cache-control": "no-store" });
  }

  /** The `relay` fault: the target's answer to the same quote request, passed off as ours. */
  function relayQuote(req: IncomingMessage, res: ServerResponse, target: string): void {
    const url = new URL(req.url ?? "/", target.replace(/\/+$/, "") + "/");
    url.pathname = new URL(target).pathname.replace(/\/+$/, "") + NODE_QUOTE_PATH;
    const onAnswer = (upstream: IncomingMessage) => {
      const chunks: Buffer[] = [];
      upstream.on("data", (chunk: Buffer) => chunks.push(chunk));
      upstream.on("end", () =>
        sendJson(res, upstream.statusCode ?? 502, Buffer.concat(chunks).toString("utf8")),
      );
      upstream.on("error", () => res.destroy());
    };
    // The relay takes any certificate: it is the attacker here, not the verifier.
    const request =
      url.protocol === "https:"
        ? httpsGet(url, { rejectUnauthorized: false }, onAnswer)
        : createHttpGet(url, onAnswer);
    request.on("error", () => sendJson(res, 502, '{"detail":"relay target unreachable"}'));
  }

  function methodNotAllowed(res: ServerResponse): void {
    sendJson(res, 405, '{"detail":"Method Not Allowed"}');
  }

  function route(req: IncomingMessage, res: ServerResponse): Promise<void> | void {
    const url = req.url ?? "/";
    const query = url.indexOf("?");
    const path = query === -1 ? url : url.slice(0, query);
    const method = req.method;
    switch (path) {
      case "/v1/chat/completions":
      case "/v1/completions":
      case "/v1/responses":
      case "/v1/embeddings":
        if (method !== "POST") return methodNotAllowed(res);
        return handleInference(req, res, INFERENCE_KINDS[path], path);
      case "/health":
        return method === "GET" ? handleHealth(res) : methodNotAllowed(res);
      case "/metrics":
        return method === "GET" ? handleMetrics(res) : methodNotAllowed(res);
      case "/v1/models":
        return method === "GET" ? sendJson(res, 200, modelsBody) : methodNotAllowed(res);
      case NODE_QUOTE_PATH:
        return handleQuote(req, res);
      case "/_sim/fault":
        return handleFault(req, res);
      case "/_sim/config":
        return handleConfig(req, res);
      case "/_sim/stats":
        return method === "GET"
          ? sendJson(res, 200, JSON.stringify(stats()))
          : methodNotAllowed(res);
      case "/_sim/reset-stats":
        if (method !== "POST") return methodNotAllowed(res);
        resetStats();
        return sendJson(res, 200, JSON.stringify(stats()));
      default:
        if (path.startsWith(MODEL_PATH_PREFIX) && method === "GET") {
          return handleModel(res, decodeURIComponent(path.slice(MODEL_PATH_PREFIX.length)));
        }
        return sendJson(res, 404, '{"detail":"Not Found"}');
    }
  }

  function failed(res: ServerResponse): void {
    // A bug must cost one request, never the node.
    if (res.headersSent) res.destroy();
    else
      sendJson(res, 500, errorBodyJson({ status: 500, message: "simulator error", param: null }));
  }

  const handler = (
    request: IncomingMessage | Http2ServerRequest,
    response: ServerResponse | Http2ServerResponse,
  ) => {
    const [req, res] = asHttp1(request, response);
    res.setHeader("x-sim-node", nodeId);
    // An HTTP/1.1 connection from before a key swap ends after this answer (HTTP/2 sessions
    // are closed gracefully by the swap itself).
    const key = isHttp2(req) ? undefined : keyOfSocket.get(req.socket);
    if (key !== undefined && key !== served?.keySha256) res.setHeader("connection", "close");
    try {
      const pending = route(req, res);
      if (pending !== undefined) pending.catch(() => failed(res));
    } catch {
      failed(res);
    }
  };
  const { server, http2 } = createNodeServer(protocol, served, handler);
  // Every TCP connection, so that close() can end those no HTTP server has taken yet.
  const sockets = new Set<Socket>();
  if (protocol !== "http1") {
    server.on("connection", (socket: Socket) => {
      socket.setNoDelay(true);
      sockets.add(socket);
      socket.once("close", () => sockets.delete(socket));
    });
  }
  http2?.on("session", (session: Http2Session) => {
    sessions.add(session);
    if (served) keyOfSocket.set(session, served.keySha256);
    session.once("close", () => sessions.delete(session));
  });
  if (served !== undefined) {
    // HTTP/1.1 over TLS (an h2 node's HTTP/1.1 clients included, chosen by ALPN).
    server.on("secureConnection", (socket: Socket) => {
      if (served) keyOfSocket.set(socket, served.keySha256);
    });
  }

  /**
   * The `key_swap` fault: a key from outside the TD from now on. Idle connections are dropped
   * at once, busy ones after their answer.
   */
  function swapKey(): void {
    if (served === undefined || !("setSecureContext" in server)) {
      throw new SimInputError(
        "invalid_fault",
        "fault.kind: key_swap needs a TLS node",
        "fault.kind",
      );
    }
    served = createTlsIdentity(nodeId);
    server.setSecureContext({ key: served.keyPem, cert: served.certPem });
    if ("closeIdleConnections" in server) server.closeIdleConnections();
    // GOAWAY: open streams finish, no new ones start, then the session ends.
    for (const session of sessions) session.close();
  }

  function setFault(fault: SimFault | null): void {
    if (fault?.kind === "key_swap") swapKey();
    else faults.set(fault);
  }

  server.listen(options.port ?? 0, options.host ?? "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  if (address === null || typeof address === "string") {
    throw new Error("sim node: server has no TCP address");
  }
  const port = address.port;
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  const url = `${served === undefined ? "http" : "https"}://${host}:${port}`;

  let closed: Promise<void> | undefined;
  function close(): Promise<void> {
    closed ??= new Promise<void>((resolve) => {
      ctx.closing = true;
      gate.clear();
      server.close(() => resolve());
      if ("closeAllConnections" in server) server.closeAllConnections();
      for (const session of sessions) session.destroy();
      for (const socket of sockets) socket.destroy();
    });
    return closed;
  }

  return {
    url,
    port,
    nodeId,
    instanceId,
    stats,
    fault: () => faults.current(),
    setFault(fault) {
      setFault(fault === null ? null : parseSimFault(fault));
    },
    configure,
    resetStats,
    close,
    [Symbol.asyncDispose]: close,
  };
}

type Handler = (
  req: IncomingMessage | Http2ServerRequest,
  res: ServerResponse | Http2ServerResponse,
) => void;

function isHttp2(req: IncomingMessage): boolean {
  return req.httpVersionMajor === 2;
}

/**
 * The listening server for `protocol`, and the HTTP/2 server behind it. An HTTP/2 node also
 * answers HTTP/1.1 on the same port, as real ones do for health probes: `h2` by ALPN, `h2c`
 * told apart by the connection preface.
 */
function createNodeServer(
  protocol: "http1" | "h2c" | "h2",
  identity: TlsIdentity | undefined,
  handler: Handler,
): {
  server: NetServer | HttpsServer | Http2SecureServer;
  http2?: Http2Server | Http2SecureServer;
} {
  const tls = identity === undefined ? undefined : { key: identity.keyPem, cert: identity.certPem };
  if (protocol === "h2c") {
    const http2 = createH2cServer(handler);
    return { server: createSniffingServer(createServer(handler), http2), http2 };
  }
  if (protocol === "h2") {
    const http2 = createH2Server({ ...tls, allowHTTP1: true }, handler);
    return { server: http2, http2 };
  }
  const server =
    tls === undefined
      ? createServer({ noDelay: true }, handler)
      : createHttpsServer({ noDelay: true, ...tls }, handler);
  return { server };
}
