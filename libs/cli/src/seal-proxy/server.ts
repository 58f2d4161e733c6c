// The seal proxy's local endpoint: an OpenAI-compatible server on loopback that seals every
// request to a verified tier-4 session and opens every answer, so any OpenAI client (the
// official SDKs, LangChain, curl) gets tier 4 end to end without a line changed.
import { createServer } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { ConfidentialSession, OpenedAnswer, OpenedStream } from "@zml/client";
import { ZmlApiError } from "@zml/client";
import { ROUTING_HTTP_HEADER, serializeRoutingHeader } from "@zml/contracts";

/** The OpenAI paths a session carries (as the gateway's inference paths). */
const INFERENCE_PATHS = new Set([
  "/v1/chat/completions",
  "/v1/completions",
  "/v1/responses",
  "/v1/embeddings",
]);
/** Codes that say the session is gone (its node failed, it expired, the TD lost its key). */
const SESSION_ENDED = new Set([
  "session_node_unavailable",
  "session_expired",
  "session_not_found",
  "session_key_unknown",
]);
const MAX_BODY_BYTES = 16 * 1024 * 1024;
/** A session this close to its expiry is replaced before a request is sealed to it. */
const RENEW_BEFORE_MS = 60_000;

export interface SealProxyOptions {
  model: string;
  /** Opens (and verifies) a new session. */
  openSession: () => Promise<ConfidentialSession>;
  host: string;
  port: number;
  log: (line: string) => void;
  clock?: () => number;
}

export interface SealProxy {
  url: string;
  /** The session requests are sealed to now. */
  session(): ConfidentialSession;
  close(): Promise<void>;
}

export async function startSealProxy(options: SealProxyOptions): Promise<SealProxy> {
  const clock = options.clock ?? Date.now;
  let current = await options.openSession();
  let opening: Promise<ConfidentialSession> | undefined;
  options.log(sessionLine("opened", current));

  /** A new session in place of `ended`, opened once however many requests found it ended. */
  const renew = (ended: ConfidentialSession): Promise<ConfidentialSession> => {
    if (current !== ended) return Promise.resolve(current);
    opening ??= options
      .openSession()
      .then((next) => {
        options.log(sessionLine("re-opened", next, ended));
        current = next;
        return next;
      })
      .finally(() => {
        opening = undefined;
      });
    return opening;
  };

  const usable = async (): Promise<ConfidentialSession> =>
    current.expires_at - clock() < RENEW_BEFORE_MS ? renew(current) : current;

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url ?? "/", "http://local").pathname;
    if (req.method === "GET" && (path === "/v1/models" || path === `/v1/models/${options.model}`)) {
      const model = { id: options.model, object: "model", created: 0, owned_by: "zml" };
      return sendJson(res, 200, path === "/v1/models" ? { object: "list", data: [model] } : model);
    }
    if (req.method !== "POST" || !INFERENCE_PATHS.has(path)) {
      return sendError(res, 404, "not_found", `no ${req.method ?? "GET"} ${path} here`, null);
    }
    const body = await readBody(req);
    const fields = fieldsOf(body);
    if (fields === undefined) {
      return sendError(res, 400, "invalid_json", "request body is not a JSON object", "body");
    }
    if (fields.model !== options.model) {
      return sendError(
        res,
        400,
        "unknown_model",
        `this seal proxy serves ${options.model} only (its session is for that model)`,
        "model",
      );
    }
    let session = await usable();
    for (let attempt = 1; ; attempt++) {
      try {
        if (!fields.stream) return sendWhole(res, await session.send(path, body, false));
        return await sendStream(res, await session.send(path, body, true));
      } catch (error) {
        // Sealed to a session that has ended, nothing reached the client yet: once more on a
        // new session (verified afresh), as a client would after session_node_unavailable.
        if (error instanceof ZmlApiError && SESSION_ENDED.has(error.code) && attempt === 1) {
          session = await renew(session);
          continue;
        }
        throw error;
      }
    }
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent) {
        const body = errorBody(error);
        res.end(`event: error\ndata: ${JSON.stringify(body)}\n\n`);
        return;
      }
      if (error instanceof ZmlApiError) {
        return sendError(res, error.status, error.code, error.message, error.param);
      }
      options.log(`request failed: ${(error as Error).message}`);
      sendError(res, 502, "seal_proxy_error", (error as Error).message, null);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, resolve);
  });
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  return {
    url: `http://${host}:${port}/v1`,
    session: () => current,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await current.close().catch(() => undefined);
    },
  };
}

function sessionLine(what: string, s: ConfidentialSession, ended?: ConfidentialSession): string {
  const mrtd = (s.attestation.measurement as { mrtd?: string }).mrtd?.slice(0, 16) ?? "";
  const after = ended ? ` after ${ended.session_id} ended` : "";
  return `session ${s.session_id} ${what}${after} on ${s.node_id} (quote verified, mrtd ${mrtd}…)`;
}

function fieldsOf(body: Buffer): { model: unknown; stream: boolean } | undefined {
  try {
    const parsed = JSON.parse(body.toString("utf8")) as unknown;
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return undefined;
    const fields = parsed as { model?: unknown; stream?: unknown };
    return { model: fields.model, stream: fields.stream === true };
  } catch {
    return undefined;
  }
}

function sendWhole(res: ServerResponse, answer: OpenedAnswer): void {
  res.writeHead(answer.status, {
    "content-type": answer.contentType,
    [ROUTING_HTTP_HEADER]: serializeRoutingHeader(answer.routing),
  });
  res.end(answer.body);
}

async function sendStream(res: ServerResponse, stream: OpenedStream): Promise<void> {
  const events = stream[Symbol.asyncIterator]();
  // The first event is read before the head goes out, so a stream that fails at once is
  // answered as a plain error (and may still be retried on a new session).
  const first = await events.next();
  res.writeHead(200, {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    [ROUTING_HTTP_HEADER]: serializeRoutingHeader(stream.routing),
  });
  res.once("close", () => stream.abort());
  if (!first.done) res.write(first.value);
  for (let next = await events.next(); !next.done; next = await events.next()) {
    res.write(next.value);
  }
  res.end();
}

function errorBody(error: unknown) {
  const e = error instanceof ZmlApiError ? error : undefined;
  return {
    error: {
      message: (error as Error).message,
      type: "api_error",
      param: e?.param ?? null,
      code: e?.code ?? "seal_proxy_error",
    },
  };
}

function sendError(
  res: ServerResponse,
  status: number,
  code: string,
  message: string,
  param: string | null,
): void {
  sendJson(res, status, { error: { message, type: "invalid_request_error", param, code } });
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json" });
  res.end(body);
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        req.destroy();
        reject(new Error(`request body larger than ${MAX_BODY_BYTES} bytes`));
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => resolve(Buffer.concat(chunks, size)));
    req.on("error", reject);
  });
}
