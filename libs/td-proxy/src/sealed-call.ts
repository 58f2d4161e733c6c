// One sealed request through the TD: the envelope checked, its channel found (or set up), the
// seq taken in that channel, the body opened and checked against the clear fields, the local
// server called with the client's own bytes, and its answer sealed back, whole or event by
// event. Nothing reaches the server before the
// request has opened; nothing of the body or the answer is logged.
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  SEALED_MAX_CHANNELS_PER_KEY,
  SEALED_RESPONSE_MEDIA_TYPE,
  SealedRequestSchema,
  ZmlError,
} from "@zml/contracts";
import { isDoneEvent } from "@zml/contracts";
import type { SealedRequestEnvelope } from "@zml/contracts";
import { RecipientChannel, SealedChannelError } from "@zml/seal";
import type { AeadKeyMaker, ResponseSealer } from "@zml/seal";
import type { Dispatcher } from "undici";
import { ReplayWindow } from "./replay-window.ts";
import type { ChannelState, SessionKey, SessionKeyStore } from "./session-keys.ts";
import { SseCutter } from "./sse-cutter.ts";
import type { ProxyCounters } from "./stats.ts";
import type { TdProxyLogger } from "./types.ts";

export interface SealedCallDeps {
  keys: SessionKeyStore;
  /** Makes the channels' AEAD keys (libsodium's ChaCha20-Poly1305: the TD seals every event). */
  makeKey: AeadKeyMaker;
  backend: Dispatcher;
  maxAnswerBytes: number;
  counters: ProxyCounters;
  log: TdProxyLogger;
}

/** Headers of the gateway's request that the server may see (none carries the payload). */
const FORWARDED_HEADERS = ["authorization", "traceparent", "tracestate", "x-zml-routing"];

/** Answers a sealed request that arrived on `path` with these bytes. */
export async function handleSealedCall(
  deps: SealedCallDeps,
  path: string,
  raw: Buffer,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const envelope = parseEnvelope(raw);
  const key = deps.keys.get(envelope.key_id);
  if (key === undefined) {
    throw new ZmlError(
      "session_key_unknown",
      "this TD holds no such session key: the session ended or expired; open a new one",
      { param: "key_id" },
    );
  }
  const known = key.channels.get(envelope.enc);
  const state = known ?? newChannel(deps, key, envelope);
  if (!state.replay.take(envelope.seq)) {
    throw new ZmlError(
      "sealed_request_replayed",
      `seq ${envelope.seq} was opened before in this channel, or is too far behind`,
      { param: "seq" },
    );
  }
  let opened;
  try {
    opened = state.channel.open(envelope, path);
  } catch (error) {
    state.replay.release(envelope.seq);
    throw asZmlError(error);
  }
  // A channel is kept from its first request that opened: an enc nobody can open under
  // takes no place.
  if (known === undefined) key.channels.set(envelope.enc, state);
  key.used = true;
  deps.counters.opened++;
  const { body, sealer } = opened;
  const mismatch = innerMismatch(body, envelope);
  if (mismatch !== undefined) {
    deps.counters.refused(mismatch.code);
    return sendSealed(res, sealer, 400, "application/json", errorJson(mismatch));
  }
  await callServer(deps, path, body, envelope.stream, sealer, req, res);
}

/** The channel a request's `enc` sets up (one X25519 agreement), not kept yet. */
function newChannel(
  deps: SealedCallDeps,
  key: SessionKey,
  envelope: SealedRequestEnvelope,
): ChannelState {
  if (key.channels.size >= SEALED_MAX_CHANNELS_PER_KEY) {
    throw new ZmlError(
      "sealed_request_invalid",
      `this session key has ${SEALED_MAX_CHANNELS_PER_KEY} channels already: seal with one ` +
        "of them, or open a new session",
      { param: "enc" },
    );
  }
  try {
    return {
      channel: new RecipientChannel(key.pair, envelope.suite, envelope.enc, deps.makeKey),
      replay: new ReplayWindow(),
    };
  } catch (error) {
    throw asZmlError(error);
  }
}

function parseEnvelope(raw: Buffer): SealedRequestEnvelope {
  let data: unknown;
  try {
    data = JSON.parse(raw.toString("utf8"));
  } catch {
    throw new ZmlError("sealed_request_invalid", "the sealed request is not JSON", {
      param: "body",
    });
  }
  const parsed = SealedRequestSchema.safeParse(data);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const param =
      issue.path.join(".") || (issue.code === "unrecognized_keys" ? issue.keys.join(",") : "body");
    throw new ZmlError("sealed_request_invalid", `${param}: ${issue.message}`, { param });
  }
  return parsed.data;
}

function asZmlError(error: unknown): ZmlError {
  if (error instanceof SealedChannelError) {
    return new ZmlError(
      error.code === "sealed_request_rejected"
        ? "sealed_request_rejected"
        : "sealed_request_invalid",
      error.message,
      { param: error.param },
    );
  }
  throw error;
}

/**
 * Why the opened body does not match its clear fields, if it does not: the gateway routed and
 * framed by those, so a body that says otherwise is refused rather than served differently.
 */
function innerMismatch(body: Buffer, envelope: SealedRequestEnvelope): ZmlError | undefined {
  let inner: unknown;
  try {
    inner = JSON.parse(body.toString("utf8"));
  } catch {
    return new ZmlError("sealed_request_invalid", "the sealed body is not JSON", {
      param: "ciphertext",
    });
  }
  if (typeof inner !== "object" || inner === null || Array.isArray(inner)) {
    return new ZmlError("sealed_request_invalid", "the sealed body is not a JSON object", {
      param: "ciphertext",
    });
  }
  const fields = inner as { model?: unknown; stream?: unknown };
  if (fields.model !== envelope.model) {
    return new ZmlError("sealed_request_invalid", "the sealed body names another model", {
      param: "model",
    });
  }
  if ((fields.stream ?? false) !== envelope.stream) {
    return new ZmlError("sealed_request_invalid", "the sealed body's stream differs", {
      param: "stream",
    });
  }
  return undefined;
}

async function callServer(
  deps: SealedCallDeps,
  path: string,
  body: Buffer,
  stream: boolean,
  sealer: ResponseSealer,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const abort = new AbortController();
  // Only an answer cut short stops the server's call: aborting makes a DOMException, which
  // for every finished answer measured about 3 % of the proxy's busy time.
  res.on("close", () => {
    if (!res.writableFinished) abort.abort();
  });
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: stream ? "text/event-stream" : "application/json",
  };
  for (const name of FORWARDED_HEADERS) {
    const value = req.headers[name];
    if (typeof value === "string") headers[name] = value;
  }
  let answer: Dispatcher.ResponseData;
  try {
    deps.counters.serverCalls++;
    answer = await deps.backend.request({
      path,
      method: "POST",
      headers,
      body,
      signal: abort.signal,
    });
  } catch (error) {
    if (abort.signal.aborted) return;
    deps.log.warn({ err: String(error), path }, "the TD's server could not be reached");
    throw new ZmlError("upstream_unavailable", "the TD's inference server did not answer");
  }
  const status = answer.statusCode;
  const contentType = String(answer.headers["content-type"] ?? "application/json");
  if (stream && status === 200 && contentType.startsWith("text/event-stream")) {
    return relaySealedEvents(deps, answer, sealer, res);
  }
  let bytes: Buffer;
  try {
    bytes = await readCapped(answer, deps.maxAnswerBytes);
  } catch (error) {
    deps.log.warn({ err: String(error), path }, "the TD's server's answer broke off");
    res.destroy();
    return;
  }
  sendSealed(res, sealer, status, contentType, bytes);
}

/**
 * A stream: the sealed head goes out with the server's first event that carries data, not
 * before, so the gateway's first-byte limit bounds the server's time to its first token as it
 * does for a stream in clear (the dispatcher holds a stream's head until its first event); and
 * the head costs no write and no gateway message of its own. Events before that one
 * (comments, keep-alives) are sealed in order and held with the head, at most
 * `HELD_BEFORE_DATA_BYTES`. Then each event as it arrives, and the final chunk once the server
 * ended cleanly. A server that breaks off, or ends mid-event, gets no final chunk: the
 * connection is cut, and the client sees a stream that did not finish.
 *
 * Writes: the frames of one read are plain `res.write`s, which node corks until the next tick
 * and sends as one writev. (An explicit `res.cork()`/`uncork()` does worse for a chunked
 * answer: `uncork` uncorks the socket before it writes the chunk's length, so that length went
 * out alone, one more TLS record and syscall per read.) A read's last event that is
 * `data: [DONE]` is held, sealed, until the server's stream ends (or more comes), so it and the
 * final chunk travel as one write and one message through the gateway: it carries no token,
 * so holding it costs none.
 */
function relaySealedEvents(
  deps: SealedCallDeps,
  answer: Dispatcher.ResponseData,
  sealer: ResponseSealer,
  res: ServerResponse,
): Promise<void> {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-store" });
  const cutter = new SseCutter();
  let size = 0;
  /**
   * Sealed frames not written yet: the head and what came before the first data event, then
   * (after it) at most a `[DONE]`. Sealed in order, so written before anything after them.
   */
  let held: Buffer[] = [sealer.streamHead({ status: 200, content_type: "text/event-stream" })];
  let heldBytes = held[0]!.length;
  let started = false;
  return new Promise((resolve) => {
    answer.body.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > deps.maxAnswerBytes) {
        answer.body.destroy(new Error(`answer larger than ${deps.maxAnswerBytes} bytes`));
        return;
      }
      const events = cutter.push(chunk);
      const last = events.length - 1;
      for (let i = 0; i <= last; i++) {
        const event = events[i]!;
        const frame = sealer.streamEvent(event);
        if (!started) {
          held.push(frame);
          heldBytes += frame.length;
          if (!hasDataField(event) && heldBytes < HELD_BEFORE_DATA_BYTES) continue;
          started = true;
          res.write(Buffer.concat(held, heldBytes));
          held = [];
          continue;
        }
        if (held.length > 0) res.write(held.pop()!);
        if (i === last && isDoneEvent(event)) held.push(frame);
        else res.write(frame);
      }
    });
    answer.body.on("end", () => {
      if (cutter.hasRest()) {
        deps.log.warn({}, "the TD's server ended its stream in the middle of an event");
        res.destroy();
      } else {
        // What is held and the final chunk as end()'s one buffer: one write with the
        // response's terminator.
        held.push(sealer.streamEnd());
        res.end(held.length === 1 ? held[0] : Buffer.concat(held));
      }
      resolve();
    });
    answer.body.on("error", (error) => {
      deps.log.warn({ err: String(error) }, "the TD's server's stream broke off");
      res.destroy();
      resolve();
    });
  });
}

/**
 * Most bytes of sealed frames held before the server's first data event (its comments or
 * keep-alives), as the dispatcher holds at most 256 KiB of them: past that they go out.
 */
const HELD_BEFORE_DATA_BYTES = 256 * 1024;

/**
 * Whether an event has a `data` field (a line `data` or `data:…`): what an SSE client
 * dispatches, and what the dispatcher counts as a stream's first byte.
 */
function hasDataField(event: Buffer): boolean {
  let line = 0;
  while (line < event.length) {
    if (
      event[line] === 0x64 && // d
      event[line + 1] === 0x61 && // a
      event[line + 2] === 0x74 && // t
      event[line + 3] === 0x61 && // a
      (event[line + 4] === 0x3a || event[line + 4] === 0x0a || event[line + 4] === 0x0d)
    ) {
      return true;
    }
    const lf = event.indexOf(0x0a, line);
    if (lf === -1) return false;
    line = lf + 1;
  }
  return false;
}

function sendSealed(
  res: ServerResponse,
  sealer: ResponseSealer,
  status: number,
  contentType: string,
  body: Uint8Array,
): void {
  const sealed = sealer.answer({ status, content_type: contentType }, body);
  res.writeHead(status, {
    "content-type": SEALED_RESPONSE_MEDIA_TYPE,
    "content-length": String(sealed.length),
    "cache-control": "no-store",
  });
  res.end(sealed);
}

function errorJson(error: ZmlError): Buffer {
  return Buffer.from(
    JSON.stringify({
      error: {
        message: error.message,
        type: "invalid_request_error",
        param: error.param,
        code: error.code,
      },
    }),
  );
}

async function readCapped(answer: Dispatcher.ResponseData, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of answer.body as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > max) {
      answer.body.destroy();
      throw new Error(`answer larger than ${max} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size);
}
