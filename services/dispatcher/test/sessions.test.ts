import { openKv, watchKvIntoMap } from "@zml/bus";
import { startBusRig } from "@zml/bus/testing";
import type { BusRig } from "@zml/bus/testing";
import { SESSIONS_BUCKET, SessionSchema } from "@zml/contracts";
import type { AttestationVerdict, NodeSpec, Session } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkSession } from "../src/session/session-check.ts";
import type { SessionNodeView } from "../src/session/session-check.ts";
import { createSessionStore } from "../src/session/session-store.ts";
import { sessionAttestation } from "./session-fixture.ts";

const NOW = 1_700_000_000_000;
const log = { info() {}, warn() {}, error() {} };

function session(extra: Partial<Session> = {}): Session {
  return SessionSchema.parse({
    type: "session.v1",
    session_id: `ses-${"ab".repeat(16)}`,
    account: "acme",
    model: "llama",
    node_id: "t4-a",
    node_instance_id: "i-1",
    tier: 4,
    policy: "balanced",
    created_at: NOW - 1_000,
    expires_at: NOW + 60_000,
    attestation: sessionAttestation(NOW - 1_000),
    ...extra,
  });
}

const NODE = { id: "t4-a", tier: 4, models: ["llama"] } as NodeSpec;

function view(extra: Partial<SessionNodeView> = {}): SessionNodeView {
  return {
    node: (id) => (id === NODE.id ? NODE : undefined),
    active: () => true,
    instanceId: () => "i-1",
    verdict: (): AttestationVerdict => ({ usable: true }),
    ...extra,
  };
}

const request = { sessionId: `ses-${"ab".repeat(16)}`, account: "acme", model: "llama", tier: 4 };

describe("checkSession", () => {
  it("lets a live session through to its node", () => {
    const check = checkSession(session(), request, view(), NOW);
    expect(check).toMatchObject({ ok: true, node: NODE });
  });

  it.each([
    ["unknown", undefined, request],
    ["another account's", session(), { ...request, account: "other" }],
    ["for another model", session(), { ...request, model: "mistral" }],
    [
      "deleted",
      session({ ended: { at: NOW - 1, reason_code: "deleted", reason: "by owner" } }),
      request,
    ],
  ])("answers session_not_found for an %s session, saying nothing more", (_w, s, req) => {
    const check = checkSession(s, req, view(), NOW);
    expect(check).toMatchObject({ ok: false, error: { code: "session_not_found", status: 404 } });
    expect(check).not.toHaveProperty("end");
    expect(check.ok || check.error.message).toBe(`no session ${request.sessionId}`);
  });

  it("answers session_expired (410) from expires_at on, and refuses another tier", () => {
    const expired = checkSession(session(), request, view(), NOW + 60_000);
    expect(expired).toMatchObject({ ok: false, error: { code: "session_expired", status: 410 } });
    const tier1 = checkSession(session(), { ...request, tier: 1 }, view(), NOW);
    expect(tier1).toMatchObject({ ok: false, error: { code: "invalid_request", param: "tier" } });
  });

  it("keeps refusing an ended session without ending it again", () => {
    const ended = session({
      ended: { at: NOW - 1, reason_code: "node_unavailable", reason: "node t4-a failed" },
    });
    const check = checkSession(ended, request, view(), NOW);
    expect(check).toMatchObject({
      ok: false,
      error: { code: "session_node_unavailable", status: 503, retryable: false },
    });
    expect(check).not.toHaveProperty("end");
  });

  it.each([
    ["left the fleet", { node: () => undefined }, /no longer serves/],
    [
      "lost its attestation",
      {
        verdict: (): AttestationVerdict => ({ usable: false, reason: "revoked", detail: "CVE" }),
      },
      /attestation not usable: CVE/,
    ],
    ["is not Active", { active: () => false }, /not Active/],
    ["restarted", { instanceId: () => "i-2" }, /restarted/],
  ])("ends the session when its node %s", (_w, extra: Partial<SessionNodeView>, why) => {
    const check = checkSession(session(), request, view(extra), NOW);
    expect(check).toMatchObject({ ok: false, error: { code: "session_node_unavailable" } });
    expect(check.ok ? "" : check.end).toMatch(why);
  });

  it("does not end a session over an instance id nobody reports", () => {
    const check = checkSession(session(), request, view({ instanceId: () => null }), NOW);
    expect(check.ok).toBe(true);
    const unknown = checkSession(session({ node_instance_id: null }), request, view(), NOW);
    expect(unknown.ok).toBe(true);
  });
});

describe("session store", () => {
  let rig: BusRig;
  beforeAll(async () => {
    rig = await startBusRig({ name: "sessions-test" });
  });
  afterAll(() => rig?.stop());

  async function replica() {
    const kv = await openKv(rig.bus, SESSIONS_BUCKET);
    const watched = await watchKvIntoMap(rig.bus, kv, { schema: SessionSchema, log });
    return { store: createSessionStore(kv, watched), watched };
  }

  it("reads its own writes at once, and another replica's through KV before its watch", async () => {
    const a = await replica();
    const b = await replica();
    const s = session({ session_id: `ses-${"01".repeat(16)}` });
    await a.store.create(s);
    expect(a.store.get(s.session_id)).toEqual(s);
    expect(await b.store.lookup(s.session_id)).toEqual(s);
    await expect(a.store.create(s)).rejects.toThrow();

    const ended = await b.store.end(s, "node_unavailable", "node t4-a failed", NOW);
    expect(b.store.get(s.session_id)?.ended).toMatchObject({ reason_code: "node_unavailable" });
    await pollUntil(() => a.store.get(s.session_id)?.ended !== null, { message: "end seen by a" });
    expect(a.store.get(s.session_id)).toEqual(ended);
    a.watched.stop();
    b.watched.stop();
  });

  it("never asks KV for ids it did not issue", async () => {
    const a = await replica();
    // A KV read of this key would throw (':' is not a valid key character).
    expect(await a.store.lookup("ses:not-a-key")).toBeUndefined();
    expect(await a.store.lookup(`ses-${"ff".repeat(16)}`)).toBeUndefined();
    a.watched.stop();
  });

  it("sweeps ended and expired sessions once their retention is over", async () => {
    const a = await replica();
    const live = session({ session_id: `ses-${"02".repeat(16)}`, expires_at: NOW + 10_000 });
    const expired = session({ session_id: `ses-${"03".repeat(16)}`, expires_at: NOW - 5_000 });
    const ended = session({
      session_id: `ses-${"04".repeat(16)}`,
      ended: { at: NOW - 5_000, reason_code: "deleted", reason: "by owner" },
    });
    for (const s of [live, expired, ended]) await a.store.create(s);
    await pollUntil(() => a.watched.map.has(ended.session_id), { message: "watched" });
    expect(await a.store.sweep(NOW, 10_000)).toBe(0);
    expect(await a.store.sweep(NOW, 5_000)).toBe(2);
    await pollUntil(
      () => !a.watched.map.has(expired.session_id) && !a.watched.map.has(ended.session_id),
      {
        message: "swept",
      },
    );
    expect(await a.store.lookup(expired.session_id)).toBeUndefined();
    expect(a.store.get(live.session_id)).toEqual(live);
    a.watched.stop();
  });
});
