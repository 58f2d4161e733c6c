import { JOB_STREAMS, ZmlError, jobResultSubject } from "@zml/contracts";
import type { JsonEndpoint } from "@zml/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  ensureJobStreams,
  lastStreamMessage,
  natsConnectionOf,
  publishToStream,
  requestJson,
  serveJson,
} from "../src/index.ts";
import { startBusRig } from "../src/testing/index.ts";
import type { BusRig } from "../src/testing/index.ts";

const log = { info() {}, warn() {}, error() {} };
let rig: BusRig;

beforeAll(async () => {
  rig = await startBusRig({ name: "request-reply-test" });
});
afterAll(() => rig?.stop());

const Reply = z.union([
  z.object({ type: z.literal("echo.reply.v1"), text: z.string() }),
  z.object({
    type: z.literal("echo.reply.v1"),
    error: z.object({ code: z.string(), message: z.string() }),
  }),
]);
const endpoint = (subject: string) =>
  ({
    subject,
    queue: "echo",
    request: z.strictObject({ type: z.literal("echo.v1"), text: z.string().min(1) }),
    reply: Reply,
    replyType: "echo.reply.v1",
  }) satisfies JsonEndpoint<z.ZodType, z.ZodType>;
const options = { timeoutMs: 2_000, service: "the echo service" };

describe("requestJson / serveJson", () => {
  it("round-trips a request validated both ways", async () => {
    const echo = endpoint("t.echo");
    const sub = serveJson(
      rig.bus,
      echo,
      (r) => Promise.resolve({ type: "echo.reply.v1" as const, text: r.text }),
      {
        log,
      },
    );
    expect(await requestJson(rig.bus, echo, { type: "echo.v1", text: "hi" }, options)).toEqual({
      type: "echo.reply.v1",
      text: "hi",
    });
    sub.unsubscribe();
  });

  it("answers invalid_request to a request that breaks its schema", async () => {
    const echo = endpoint("t.echo.bad");
    const sub = serveJson(
      rig.bus,
      echo,
      (r) => Promise.resolve({ type: "echo.reply.v1" as const, text: r.text }),
      {
        log,
      },
    );
    const raw = await natsConnectionOf(rig.bus).request(echo.subject, '{"type":"echo.v1"}', {
      timeout: 2_000,
    });
    expect(JSON.parse(raw.string())).toMatchObject({ error: { code: "invalid_request" } });
    sub.unsubscribe();
  });

  it("answers internal_error when the handler throws", async () => {
    const echo = endpoint("t.echo.throws");
    const sub = serveJson(rig.bus, echo, () => Promise.reject(new Error("boom")), { log });
    expect(await requestJson(rig.bus, echo, { type: "echo.v1", text: "x" }, options)).toMatchObject(
      {
        error: { code: "internal_error" },
      },
    );
    sub.unsubscribe();
  });

  it("refuses to send a request that breaks its schema", async () => {
    await expect(
      requestJson(rig.bus, endpoint("t.echo"), { type: "echo.v1", text: "" }, options),
    ).rejects.toThrow(/invalid message on t.echo/);
  });

  it("names the missing service as bus_unavailable, and a silent one as gateway_timeout", async () => {
    const nobody = await requestJson(
      rig.bus,
      endpoint("t.nobody"),
      { type: "echo.v1", text: "x" },
      options,
    ).catch((e: unknown) => e);
    expect(nobody).toBeInstanceOf(ZmlError);
    expect(nobody).toMatchObject({
      code: "bus_unavailable",
      message: "the echo service is not running",
    });
    const silent = natsConnectionOf(rig.bus).subscribe("t.silent", { callback: () => {} });
    const late = await requestJson(
      rig.bus,
      endpoint("t.silent"),
      { type: "echo.v1", text: "x" },
      { ...options, timeoutMs: 200 },
    ).catch((e: unknown) => e);
    expect(late).toMatchObject({ code: "gateway_timeout" });
    silent.unsubscribe();
  });
});

describe("stream publishing", () => {
  it("stores a message once when the subject must be empty, and reads it back", async () => {
    await ensureJobStreams(rig.bus);
    const subject = jobResultSubject("fence-account", "fence-test");
    const first = await publishToStream(rig.bus, subject, new TextEncoder().encode("one"), {
      onlyIfSubjectEmpty: true,
    });
    const second = await publishToStream(rig.bus, subject, new TextEncoder().encode("two"), {
      onlyIfSubjectEmpty: true,
    });
    expect(first).toEqual({ stored: true, duplicate: false });
    expect(second).toEqual({ stored: false });
    const stored = await lastStreamMessage(rig.bus, JOB_STREAMS.results, subject);
    expect(new TextDecoder().decode(stored!.data)).toBe("one");
  });
});
