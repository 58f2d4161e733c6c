// executeRoute's session path through a dispatcher started in-process: a tier-4 session's
// requests reach its node only, and a failing node ends the session.
import { createHash } from "node:crypto";
import { SessionSchema } from "@zml/contracts";
import type { Session } from "@zml/contracts";
import { sessionAttestation } from "../session-fixture.ts";
import { afterEach, describe, expect, it } from "vitest";
import { MODEL, startRig } from "./dispatcher-rig.ts";
import type { Rig } from "./dispatcher-rig.ts";

const SESSION_ID = `ses-${"cd".repeat(16)}`;
let rig: Rig | undefined;
afterEach(async () => {
  await rig?.stop();
  rig = undefined;
});

function session(): Session {
  const now = Date.now();
  return SessionSchema.parse({
    type: "session.v1",
    session_id: SESSION_ID,
    account: "acct",
    model: MODEL,
    node_id: "t4a",
    node_instance_id: "instance-t4a",
    tier: 4,
    policy: "balanced",
    created_at: now,
    expires_at: now + 600_000,
    attestation: sessionAttestation(now),
    ended: null,
  });
}

/** Two attested tier-4 nodes; the session is pinned to t4a. */
const start = async () =>
  (rig = await startRig({
    nodes: [
      { id: "t4a", family: "H100", tier: 4, sim: { instanceId: "instance-t4a" } },
      { id: "t4b", family: "H100", tier: 4 },
    ],
    sessions: [session()],
  }));
const KEY_ID = createHash("sha256")
  .update(Buffer.from(sessionAttestation(0).session_public_key, "base64"))
  .digest("hex");
const inSession = { tier: 4, sessionId: SESSION_ID, sealedKeyId: KEY_ID };

describe("dispatcher in process: tier-4 sessions", () => {
  it("sends a session's requests to its node only", async () => {
    const r = await start();
    // The rig's nodes are no TD proxies: they cannot seal an answer, and a 2xx that is not
    // sealed is refused (next test). A 4xx is relayed as it came (the TD proxy's own
    // refusals are clear ones: 409 for a replayed request), so it carries the answers here.
    r.sims.get("t4a")!.setFault({ kind: "status", status: 409 });
    for (let i = 0; i < 3; i++) {
      const answer = await r.send(inSession);
      expect(answer.status).toBe(409);
      expect(answer.routing).toMatchObject({ node: "t4a", tier: 4, attempts: 1 });
    }
    expect(r.payloads()).toEqual({ t4a: 3, t4b: 0 });
  });

  it("ends the session when its node answers in clear: a session's answers are sealed", async () => {
    const r = await start();
    const plain = await r.send(inSession);
    expect(plain.error).toMatchObject({ code: "session_node_unavailable" });
    expect(plain.error?.message).toContain(
      "answered application/json where application/vnd.zml.sealed-response+json is due",
    );
    expect(plain.text).not.toContain("chat.completion");
    expect(r.payloads()).toEqual({ t4a: 1, t4b: 0 });
  });

  it("ends the session when its node fails, and never retries elsewhere", async () => {
    const r = await start();
    r.sims.get("t4a")!.setFault({ kind: "status", status: 503, times: 1 });
    const failed = await r.send(inSession);
    expect(failed.error).toMatchObject({ code: "session_node_unavailable", param: "session_id" });
    expect(failed.routing).toMatchObject({ node: "t4a", attempts: 1 });
    // The node is healthy again, but the session's key is gone with it: the session stays ended.
    const after = await r.send(inSession);
    expect(after.error).toMatchObject({ code: "session_node_unavailable" });
    expect(r.payloads()).toEqual({ t4a: 1, t4b: 0 });
  });

  it("ends the session when the node's TD holds no key for it any more (410)", async () => {
    const r = await start();
    r.sims.get("t4a")!.setFault({ kind: "status", status: 410, times: 1 });
    const failed = await r.send(inSession);
    expect(failed.error).toMatchObject({ code: "session_node_unavailable" });
    expect((await r.send(inSession)).error).toMatchObject({ code: "session_node_unavailable" });
    expect(r.payloads()).toEqual({ t4a: 1, t4b: 0 });
  });

  it("sends nothing that is not sealed to the session's key, nor tier 4 outside a session", async () => {
    const r = await start();
    const clear = await r.send({ tier: 4, sessionId: SESSION_ID });
    expect(clear.error).toMatchObject({ code: "sealed_body_required" });
    const otherKey = await r.send({ ...inSession, sealedKeyId: "00".repeat(32) });
    expect(otherKey.error).toMatchObject({ code: "sealed_key_mismatch", param: "key_id" });
    const noSession = await r.send({ tier: 4 });
    expect(noSession.error).toMatchObject({ code: "sealed_body_required" });
    expect(r.payloads()).toEqual({ t4a: 0, t4b: 0 });
  });

  it("refuses an unknown session and a session request at another tier", async () => {
    const r = await start();
    const unknown = await r.send({ ...inSession, sessionId: `ses-${"ef".repeat(16)}` });
    expect(unknown.error).toMatchObject({ code: "session_not_found" });
    const wrongTier = await r.send({ ...inSession, tier: 1 });
    expect(wrongTier.error).toMatchObject({ code: "invalid_request", param: "tier" });
    expect(r.payloads()).toEqual({ t4a: 0, t4b: 0 });
  });
});
