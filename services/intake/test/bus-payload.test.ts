import { startNatsServer } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { auth, errorOf, startIntake } from "./helpers.ts";
import type { Harness } from "./helpers.ts";

/** A nats-server whose max_payload is below intake's body limit: a misconfigured stack. */
let h: Harness;
beforeAll(async () => {
  const nats = await startNatsServer({ env: { PATH: process.env.PATH }, maxPayload: "32KB" });
  h = await startIntake({ nats, config: { ZML_BODY_LIMIT_BYTES: 256 * 1024 } });
});
afterAll(async () => {
  await h?.close();
  await h?.nats.stop();
});

describe("a body the bus cannot carry", () => {
  it("is a 413 naming the body, not a 500", async () => {
    const body = JSON.stringify({
      model: "m1",
      messages: [{ role: "user", content: "x".repeat(64 * 1024) }],
    });
    const res = await fetch(`${h.url}/v1/chat/completions`, {
      method: "POST",
      headers: auth(),
      body,
    });
    expect(res.status).toBe(413);
    const text = await res.text();
    expect(errorOf(text)).toMatchObject({ code: "payload_too_large", param: "body" });
    expect(text).toContain("message bus");
  });
});
