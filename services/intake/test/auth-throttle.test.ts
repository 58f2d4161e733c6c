import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAuthThrottle } from "../src/admission/auth-throttle.ts";
import { ADMIN_TOKEN, API_KEY, admin, auth, errorOf, startIntake } from "./helpers.ts";
import type { Harness } from "./helpers.ts";

describe("createAuthThrottle", () => {
  const options = { burst: 3, perMinute: 6, maxAddresses: 100 };

  it("lets an address fail `burst` times, then blocks it with the wait until its next try", () => {
    const t = createAuthThrottle(options);
    for (let i = 0; i < 3; i++) {
      expect(t.blockedFor("a", 0)).toBeUndefined();
      t.recordFailure("a", 0);
    }
    expect(t.blockedFor("a", 0)).toBe(10); // 6 a minute: one every 10 s
    expect(t.blockedFor("b", 0)).toBeUndefined();
    expect(t.blockedFor("a", 9_000)).toBe(1);
    expect(t.blockedFor("a", 10_000)).toBeUndefined();
  });

  it("forgets the oldest address first when it remembers too many", () => {
    const t = createAuthThrottle({ ...options, burst: 1, maxAddresses: 2 });
    t.recordFailure("a", 0);
    t.recordFailure("b", 0);
    t.recordFailure("c", 0);
    expect(t.blockedFor("a", 0)).toBeUndefined();
    expect(t.blockedFor("b", 0)).toBe(10);
    expect(t.blockedFor("c", 0)).toBe(10);
  });
});

describe("failed authentication over HTTP", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startIntake({
      config: { ZML_AUTH_FAILURE_BURST: 5, ZML_AUTH_FAILURES_PER_MINUTE: 1 },
    });
  });
  afterAll(() => h.close());

  it("throttles an address after repeated wrong keys and admin tokens, even for a right key", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${h.url}/v1/models`, { headers: auth(`wrong-key-${i}-0123456789`) });
      statuses.push(res.status);
      await res.arrayBuffer();
    }
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${h.url}/admin/v1/nodes`, {
        headers: admin(`wrong-token-${i}-000000`),
      });
      statuses.push(res.status);
      await res.arrayBuffer();
    }
    expect(statuses).toEqual([401, 401, 401, 401, 401]);

    const right = await fetch(`${h.url}/v1/models`, { headers: auth(API_KEY) });
    expect(right.status).toBe(429);
    expect(Number(right.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(errorOf(await right.text())).toMatchObject({
      code: "auth_throttled",
      param: "authorization",
    });
    const adminRight = await fetch(`${h.url}/admin/v1/nodes`, { headers: admin(ADMIN_TOKEN) });
    expect(adminRight.status).toBe(429);
    await adminRight.arrayBuffer();

    // Health and metrics stay reachable: they take no credential.
    const health = await fetch(`${h.url}/healthz`);
    expect(health.status).toBe(200);
    await health.arrayBuffer();
  });

  it("marks every answer nosniff", async () => {
    const res = await fetch(`${h.url}/healthz`);
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    await res.arrayBuffer();
  });
});
