// The TD proxy: the one process a tier 3/4 TD exposes. It terminates TLS with a key made here,
// in the TD's memory, and serves quotes whose REPORTDATA binds that key (and, for a tier-4
// session, a session key made here too). Tier 4: it opens sealed requests, calls the serving
// framework on loopback with the client's own bytes, and seals the answers. The gateway in
// front of it carries only ciphertext.
import { generateKeyPairSync } from "node:crypto";
import { createServer } from "node:https";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import {
  isInferencePath,
  NODE_QUOTE_PATH,
  NODE_SESSION_KEYS_PATH,
  NonceHexSchema,
  SEALED_REQUEST_MEDIA_TYPE,
  SESSION_KEY_GRACE_S,
  SESSION_MAX_TTL_S,
  toOpenAiError,
  ZmlError,
} from "@zml/contracts";
import type { NodeQuoteResponse } from "@zml/contracts";
import { sodiumAeadKeys } from "@zml/seal/sodium";
import { reportDataFor, spkiSha256 } from "@zml/tdx";
import { createSelfSignedCertificate } from "@zml/tdx/testing";
import { Pool } from "undici";
import type { Quoter } from "./quoter.ts";
import { handleSealedCall } from "./sealed-call.ts";
import { SessionKeyStore, TooManySessionKeysError } from "./session-keys.ts";
import { ProxyCounters } from "./stats.ts";
import type { TdProxyLogger, TdProxyStats } from "./types.ts";

export interface TdProxyOptions {
  /** The serving framework inside the TD, on loopback, e.g. `http://127.0.0.1:8000`. */
  backend: string;
  quoter: Quoter;
  /** Default `0.0.0.0`. */
  host?: string;
  /** Default 0 (any free port). */
  port?: number;
  /** Names the TLS certificate; the quote, not the name, vouches for the key. */
  name?: string;
  /**
   * Pass plain inference requests to the server (a tier-3 node). Default false: a tier-4 TD
   * serves sealed requests only, so no gateway can downgrade a session to clear text.
   */
  allowPlaintext?: boolean;
  /** GET paths passed to the server as they are, for the gateway's health probes. */
  passthroughPaths?: readonly string[];
  /** Most session keys held at once (default 10 000). */
  maxSessionKeys?: number;
  /** Largest request body read (default 16 MiB). */
  maxRequestBytes?: number;
  /** Largest answer sealed (default 64 MiB). */
  maxAnswerBytes?: number;
  log: TdProxyLogger;
  clock?: () => number;
}

export interface TdProxy {
  /** `https://host:port` as the gateway reaches it (the node's `endpoint`). */
  url: string;
  /** SHA-256 (hex) of the SPKI DER of the TLS key: what the quotes bind. */
  tlsKeySha256: string;
  stats(): TdProxyStats;
  close(): Promise<void>;
}

const DEFAULT_PASSTHROUGH = ["/health", "/metrics"];
const MIB = 1024 * 1024;

export async function startTdProxy(options: TdProxyOptions): Promise<TdProxy> {
  const clock = options.clock ?? Date.now;
  const log = options.log;
  const tlsKey = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
  const tlsKeySha256 = spkiSha256(tlsKey);
  const certificate = createSelfSignedCertificate(tlsKey, options.name ?? "zml-td-proxy");
  const keys = new SessionKeyStore({ maxKeys: options.maxSessionKeys ?? 10_000, clock });
  const counters = new ProxyCounters();
  const backend = new Pool(options.backend, { connections: 64 });
  const passthrough = new Set(options.passthroughPaths ?? DEFAULT_PASSTHROUGH);
  const maxRequestBytes = options.maxRequestBytes ?? 16 * MIB;
  const sealedDeps = {
    keys,
    makeKey: await sodiumAeadKeys(),
    backend,
    maxAnswerBytes: options.maxAnswerBytes ?? 64 * MIB,
    counters,
    log,
  };
  const sweep = setInterval(() => keys.sweep(clock()), 30_000);
  sweep.unref();

  const route = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? "/", "https://td");
    const path = url.pathname;
    if (path === NODE_QUOTE_PATH) {
      if (req.method !== "GET") throw new ZmlError("invalid_request", "use GET");
      return sendJson(res, 200, await quote(url.searchParams));
    }
    if (path.startsWith(`${NODE_SESSION_KEYS_PATH}/`) && req.method === "DELETE") {
      const keyId = path.slice(NODE_SESSION_KEYS_PATH.length + 1);
      const dropped = keys.delete(keyId);
      if (dropped) log.info({ key_id: keyId }, "session key dropped");
      res.writeHead(dropped ? 204 : 404).end();
      return;
    }
    if (isInferencePath(path) && req.method === "POST") {
      const body = await readBody(req, maxRequestBytes);
      if (contentTypeOf(req) === SEALED_REQUEST_MEDIA_TYPE) {
        return handleSealedCall(sealedDeps, path, body, req, res);
      }
      if (options.allowPlaintext !== true) {
        throw new ZmlError(
          "sealed_body_required",
          `this TD serves sealed requests only (${SEALED_REQUEST_MEDIA_TYPE})`,
          { param: "content-type" },
        );
      }
      counters.plaintext++;
      return forward(req, res, path, body);
    }
    if (passthrough.has(path) && req.method === "GET") return forward(req, res, path, undefined);
    throw new ZmlError("not_found", `no ${req.method ?? "GET"} ${path} here`);
  };

  async function quote(query: URLSearchParams): Promise<NodeQuoteResponse> {
    const nonce = query.get("nonce")?.toLowerCase();
    if (!NonceHexSchema.safeParse(nonce).success) {
      throw new ZmlError("invalid_request", "nonce: expected 32 bytes of hex", { param: "nonce" });
    }
    const wantsKey = query.get("session_key") === "1" || query.get("session_key") === "true";
    const maxTtlS = SESSION_MAX_TTL_S + SESSION_KEY_GRACE_S;
    const ttlS = Number(query.get("ttl_s") ?? maxTtlS);
    if (!(Number.isInteger(ttlS) && ttlS >= 1 && ttlS <= maxTtlS)) {
      throw new ZmlError("invalid_request", `ttl_s: 1 to ${maxTtlS} seconds`, { param: "ttl_s" });
    }
    const sessionKey = wantsKey ? keys.create(ttlS * 1000) : undefined;
    const reportData = reportDataFor({
      nonce: nonce!,
      tlsKeySha256,
      sessionKeySha256: sessionKey?.keyId,
    });
    let answer: NodeQuoteResponse;
    try {
      answer = { ...(await options.quoter.quote(reportData)) };
    } catch (error) {
      if (sessionKey) keys.delete(sessionKey.keyId);
      log.error({ err: String(error), quoter: options.quoter.kind }, "no quote");
      throw new ZmlError("upstream_unavailable", "the TD could not produce a quote");
    }
    counters.quotes++;
    if (sessionKey) {
      answer.session_public_key = sessionKey.publicKeySpki.toString("base64");
      log.info({ key_id: sessionKey.keyId, ttl_s: ttlS }, "session key made");
    }
    return answer;
  }

  /** A request passed to the server unchanged, its answer streamed back unchanged. */
  async function forward(
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    body: Buffer | undefined,
  ): Promise<void> {
    const abort = new AbortController();
    // Only an answer cut short stops the server's call: aborting makes a DOMException, which
    // for every finished answer measured about 3 % of the proxy's busy time.
    res.on("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    const headers: Record<string, string> = {};
    for (const name of [
      "content-type",
      "accept",
      "authorization",
      "traceparent",
      "x-zml-routing",
    ]) {
      const value = req.headers[name];
      if (typeof value === "string") headers[name] = value;
    }
    if (body !== undefined) counters.serverCalls++;
    const answer = await backend
      .request({
        path,
        method: req.method === "GET" ? "GET" : "POST",
        headers,
        body,
        signal: abort.signal,
      })
      .catch((error: unknown) => {
        log.warn({ err: String(error), path }, "the TD's server could not be reached");
        throw new ZmlError("upstream_unavailable", "the TD's inference server did not answer");
      });
    const type = answer.headers["content-type"];
    res.writeHead(answer.statusCode, typeof type === "string" ? { "content-type": type } : {});
    answer.body.on("error", () => res.destroy());
    answer.body.pipe(res);
  }

  const server = createServer(
    { key: tlsKey.export({ type: "pkcs8", format: "pem" }), cert: certificate.pem },
    (req, res) => {
      route(req, res).catch((error: unknown) => {
        const zml =
          error instanceof ZmlError
            ? error
            : error instanceof TooManySessionKeysError
              ? new ZmlError("saturated", error.message, { retryAfterS: 5 })
              : new ZmlError("internal_error", "the TD proxy failed");
        if (!(error instanceof ZmlError || error instanceof TooManySessionKeysError)) {
          log.error({ err: String(error) }, "request failed");
        }
        counters.refused(zml.code);
        if (res.headersSent) {
          res.destroy();
          return;
        }
        sendJson(res, zml.status, toOpenAiError(zml.toBody()));
      });
    },
  );
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, options.host ?? "0.0.0.0", resolve);
  });
  const address = server.address() as AddressInfo;
  const host =
    options.host === undefined || options.host === "0.0.0.0" ? "127.0.0.1" : options.host;
  const url = `https://${host.includes(":") ? `[${host}]` : host}:${address.port}`;
  log.info(
    { url, quoter: options.quoter.kind, tls_key_sha256: tlsKeySha256, backend: options.backend },
    "td proxy ready",
  );
  return {
    url,
    tlsKeySha256,
    stats: () => counters.snapshot(keys.size),
    close: async () => {
      clearInterval(sweep);
      // The keys die with the proxy: a restarted TD holds no session's key.
      keys.clear();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await backend.close();
    },
  };
}

function contentTypeOf(req: IncomingMessage): string {
  return (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": String(Buffer.byteLength(body)),
    "cache-control": "no-store",
  });
  res.end(body);
}

function readBody(req: IncomingMessage, max: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > max) {
        req.destroy();
        reject(
          new ZmlError("payload_too_large", `body larger than ${max} bytes`, { param: "body" }),
        );
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => resolve(Buffer.concat(chunks, size)));
    req.on("error", reject);
  });
}
