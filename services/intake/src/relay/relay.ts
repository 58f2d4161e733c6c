import type { ServerResponse } from "node:http";
import { createHeaders, errorOfFrame, publishInRouteOrder } from "@zml/bus";
import type { Bus, MsgHdrs, PendingReply, ReplyMux, RouteFrame } from "@zml/bus";
import {
  countEvents,
  HEADERS,
  ROUTE_CANCEL_SUBJECT,
  ROUTE_REQUEST_SUBJECT,
  ROUTING_HTTP_HEADER,
  ZmlError,
  toOpenAiError,
} from "@zml/contracts";
import type { NodeApi } from "@zml/contracts";
import type { ErrorCode } from "@zml/contracts";
import type { FastifyReply, FastifyRequest } from "fastify";
import { sendError } from "../http/errors.ts";
import { ChunkWriter } from "./chunk-writer.ts";
import { sseErrorEvent } from "./sse.ts";

/** What the relay learned about a request, for metrics, the span and the log line. */
export interface RelayOutcome {
  /** The `x-zml-routing` value, when a node was chosen. */
  routing: string | undefined;
  /** Node time reported with the first answer frame, and when that frame arrived here. */
  nodeMs: number | undefined;
  firstFrameAt: number | undefined;
  /**
   * The error that ended the request, also when it came after the answer's first bytes (a
   * broken stream): then the client saw status 200, but the request failed.
   */
  errorCode: ErrorCode | undefined;
  /** Times the request was sent again because its dispatcher was lost before answering. */
  reroutes: number;
}

export interface RelayDeps {
  bus: Bus;
  mux: ReplyMux;
  /** Longest wait for the first reply frame, and the longest silence mid-stream. */
  idleTimeoutMs: number;
  /**
   * Answer bytes waiting for a client that reads slower than the node writes; past this the
   * client is cut off and the node call cancelled, so a client that stops reading costs a
   * bounded amount of memory.
   */
  maxBufferedBytes: number;
  /** Re-sends allowed when the serving dispatcher is lost before any answer frame. */
  reroutes: number;
  clock: () => number;
}

/** One request to relay: what it sends, whom it answers, and what it reports at the end. */
export interface RelayOptions {
  deps: RelayDeps;
  req: FastifyRequest;
  reply: FastifyReply;
  /** The body the node receives, as the client sent it (or as `/v1/infer` rewrote it). */
  body: Uint8Array;
  /** The `route.request` bus headers. */
  headers: MsgHdrs;
  /**
   * The API of a streamed request (it says how a broken stream's error event looks), null
   * when the answer is one JSON body.
   */
  streamApi: NodeApi | null;
  /**
   * Called once with the request's final status: the status the client got, or for an
   * answer that broke after its first bytes, the status of the error that ended it
   * (`outcome.errorCode` names it).
   */
  finish: (status: number, outcome: RelayOutcome) => void;
}

/**
 * Sends one routed request over the bus and relays its reply frames to the client. A
 * client that goes away before the reply is complete stops the relay and publishes
 * `route.cancel` with the request's inbox, so the dispatcher can abort the node call and
 * free its slot.
 */
export function relay({
  deps,
  req,
  reply,
  body,
  headers,
  streamApi,
  finish,
}: RelayOptions): Promise<unknown> | FastifyReply {
  const stream = streamApi !== null;
  let complete = false;
  const outcome: RelayOutcome = {
    routing: undefined,
    nodeMs: undefined,
    firstFrameAt: undefined,
    errorCode: undefined,
    reroutes: 0,
  };
  const done = (status: number, error?: ZmlError) => {
    outcome.errorCode = error?.code;
    finish(error?.status ?? status, outcome);
  };
  const send = (onFrame: (frame: RouteFrame) => void, onAbort: () => void) => {
    let reroutesLeft = deps.reroutes;
    const onAnyFrame = (frame: RouteFrame) => {
      const lost = frame.kind === "error" && errorOfFrame(frame).code === "dispatcher_lost";
      // Should the replica only have been slow, not dead, it stops the node call.
      if (lost) publishCancel(deps.bus, pending.inbox);
      // Its dispatcher died before any answer frame, so nothing reached the client yet:
      // another replica of the queue group may take the request instead.
      if (lost && outcome.firstFrameAt === undefined && reroutesLeft > 0) {
        reroutesLeft--;
        outcome.reroutes++;
        req.log.warn({ inbox: pending.inbox }, "dispatcher lost; request re-routed");
        pending = issue();
        return;
      }
      if (frame.routing) outcome.routing = frame.routing;
      if (outcome.firstFrameAt === undefined) {
        outcome.firstFrameAt = deps.clock();
        outcome.nodeMs = frame.nodeMs;
      }
      if (frame.kind === "full" || frame.kind === "end" || frame.kind === "error") {
        complete = true;
      }
      onFrame(frame);
    };
    const issue = (): PendingReply =>
      deps.mux.request(ROUTE_REQUEST_SUBJECT, body, headers, onAnyFrame, {
        idleTimeoutMs: deps.idleTimeoutMs,
      });
    let pending = issue();
    reply.raw.once("close", () => {
      if (complete) return;
      complete = true;
      pending.cancel();
      publishCancel(deps.bus, pending.inbox);
      req.log.info({ inbox: pending.inbox }, "client went away; request cancelled");
      done(499);
      onAbort();
    });
  };

  const pieces: PiecesContext = {
    requestId: req.id,
    stream,
    events: { api: streamApi, relayed: 0 },
    maxBufferedBytes: deps.maxBufferedBytes,
    done,
    onOverflow: (buffered) =>
      req.log.warn({ buffered }, "client reads too slowly; cut off and request cancelled"),
    bodyStarted: false,
  };

  if (!stream) {
    return new Promise((resolve) => {
      // Set once an answer too large for one bus message arrives in pieces.
      let raw: RawResponse | undefined;
      send(
        (frame) => {
          if (raw) return relayPiece(raw, frame, pieces);
          if (frame.kind === "full" || frame.kind === "head") {
            // Written straight to the socket: fastify's send pipeline (serializer checks,
            // onSend hooks) adds nothing to an answer relayed as bytes. A `head` starts an
            // answer too large for one bus message, relayed in pieces as they come, so
            // memory stays bounded.
            reply.hijack();
            raw = reply.raw;
            relayPiece(raw, frame, pieces);
            resolve(reply);
            return;
          }
          if (frame.routing) reply.header(ROUTING_HTTP_HEADER, frame.routing);
          const error =
            frame.kind === "error"
              ? errorOfFrame(frame)
              : new ZmlError("internal_error", `unexpected ${frame.kind} frame`);
          done(error.status, error);
          resolve(sendError(reply, error));
        },
        () => resolve(undefined),
      );
    });
  }

  reply.hijack();
  const res = reply.raw;
  send(
    (frame) => relayPiece(res, frame, pieces),
    () => undefined,
  );
  return reply;
}

function publishCancel(bus: Bus, inbox: string): void {
  if (!bus.isConnected()) return; // the dispatcher's own deadline ends the call
  const h = createHeaders();
  h.set(HEADERS.cancelInbox, inbox);
  publishInRouteOrder(bus, ROUTE_CANCEL_SUBJECT, new Uint8Array(0), h);
}

/** An HTTP/1.1 or HTTP/2-compatibility response: only what both offer is used. */
type RawResponse = ServerResponse;

interface PiecesContext {
  requestId: string;
  /** An SSE stream (a break ends with an error event) or a plain body (a break cuts it). */
  stream: boolean;
  /** The streamed API, and the events relayed so far (Responses events are numbered). */
  events: { api: NodeApi | null; relayed: number };
  maxBufferedBytes: number;
  /** Called once: the status the client got, or the error that ended the answer. */
  done: (status: number, error?: ZmlError) => void;
  onOverflow: (bufferedBytes: number) => void;
  /** Whether a chunk was written, and with it the response's head. */
  bodyStarted: boolean;
}

/** One for the process: writes are made one at a time, and it keeps one scratch buffer. */
const chunkWriter = new ChunkWriter();

/**
 * The response headers of an answer: its type, the headers the onSend hook adds to answers
 * fastify sends itself, the node's `Retry-After` (e.g. on its 429) and the routing header.
 * One object, built in place: this runs for every answer.
 */
function answerHeaders(
  ctx: PiecesContext,
  contentType: string,
  routing: string | undefined,
  retryAfterS: number | undefined,
): Record<string, string> {
  const headers: Record<string, string> = {
    "content-type": contentType,
    "x-request-id": ctx.requestId,
    "x-content-type-options": "nosniff",
  };
  if (retryAfterS !== undefined) headers["retry-after"] = String(retryAfterS);
  if (routing) headers[ROUTING_HTTP_HEADER] = routing;
  return headers;
}

/** Writes one reply frame of an answer that arrives in pieces to the client's socket. */
function relayPiece(res: RawResponse, frame: RouteFrame, ctx: PiecesContext): void {
  if (res.destroyed) return;
  switch (frame.kind) {
    case "head": {
      const type = frame.contentType ?? (ctx.stream ? "text/event-stream" : "application/json");
      const headers = answerHeaders(ctx, type, frame.routing, frame.retryAfterS);
      headers["cache-control"] = "no-cache";
      res.writeHead(frame.status ?? 200, headers);
      return;
    }
    case "chunk":
      // Only Responses events are numbered, so only they are counted.
      if (ctx.events.api === "responses") ctx.events.relayed += countEvents(frame.data);
      // One write per chunk frame, and a stream has at most one per batch (the dispatcher
      // merges a turn's events): one socket write per stream and turn (see ChunkWriter). The
      // first goes through the response, which sends the head with it; Node corks its socket
      // for the rest of the tick at that write, so a head and first chunk, or a last chunk
      // and the end, of one bus read reach the socket together. No cork here: a cork of the
      // response would hold chunks that `end()` then overtakes with the terminating chunk.
      chunkWriter.write(res, frame.data, ctx.bodyStarted);
      ctx.bodyStarted = true;
      if (res.writableLength > ctx.maxBufferedBytes) {
        ctx.onOverflow(res.writableLength);
        res.destroy(); // the response's `close` cancels the request at the dispatcher
      }
      return;
    case "end":
      res.end();
      ctx.done(res.statusCode);
      return;
    case "full":
      res.writeHead(
        frame.status ?? 502,
        answerHeaders(
          ctx,
          frame.contentType ?? "application/json",
          frame.routing,
          frame.retryAfterS,
        ),
      );
      res.end(frame.data);
      ctx.done(frame.status ?? 502);
      return;
    case "error": {
      const error = errorOfFrame(frame);
      if (res.headersSent) {
        // Mid-answer: a stream says so in an SSE event; a plain body can only be cut short,
        // which every HTTP client reports as an incomplete response.
        if (ctx.events.api !== null) {
          res.end(sseErrorEvent(error.toBody(), ctx.events.api, ctx.events.relayed));
        } else res.destroy();
        ctx.done(res.statusCode, error);
      } else {
        res.writeHead(
          error.status,
          answerHeaders(ctx, "application/json", frame.routing, error.retryAfterS || undefined),
        );
        res.end(JSON.stringify(toOpenAiError(error.toBody())));
        ctx.done(error.status, error);
      }
      return;
    }
  }
}
