import { describe, expect, it } from "vitest";
import { adminTokenWeakness } from "../src/admin/token.ts";
import { loadConfig } from "../src/config.ts";
import { ADMIN_TOKEN, startIntake } from "./helpers.ts";

const IDENTITY = { NATS_NKEY_SEED_FILE: "/creds/intake.nk" };
const ADMIN_IDENTITY = { ZML_ADMIN_NATS_NKEY_SEED_FILE: "/creds/admin.nk" };

describe("admin token strength", () => {
  it.each([
    ["short-but-16chars", /shorter than 24/],
    ["a".repeat(40), /distinct characters/],
    ["abababababababababababababab", /distinct characters/],
    ["changeme-Zr8Kq2Lm5Vx9Tn4Wb7", /"changeme"/],
    ["my-PASSWORD-is-Zr8Kq2Lm5Vx9", /"password"/],
    ["token-0123456789-0123456789", /"0123456789"/],
  ])("refuses %j", (token, why) => {
    expect(adminTokenWeakness(token)).toMatch(why);
  });

  it("accepts a random one", () => {
    expect(adminTokenWeakness("4f1c9e0b7a2d5c8e3b6a9d0c1f4e7b2a")).toBeUndefined();
    expect(adminTokenWeakness(ADMIN_TOKEN)).toBeUndefined();
  });

  it("refuses a weak token at start-up outside dev, naming the variable, and allows it in dev", () => {
    const weak = { ...IDENTITY, ...ADMIN_IDENTITY, ZML_ADMIN_TOKEN: "aaaaaaaaaaaaaaaaaaaaaaaa" };
    expect(() => loadConfig(weak)).toThrow(/ZML_ADMIN_TOKEN: too weak outside dev/);
    expect(loadConfig({ ...weak, ZML_ENV: "dev" }).ZML_ADMIN_TOKEN).toBe(weak.ZML_ADMIN_TOKEN);
  });
});

describe("bus identity settings", () => {
  it("requires the service's identity unless NATS_INSECURE is set", () => {
    expect(() => loadConfig({})).toThrow(/NATS_NKEY_SEED_FILE: required/);
    expect(loadConfig({ NATS_INSECURE: "1" }).NATS_INSECURE).toBe(true);
    expect(loadConfig(IDENTITY).NATS_NKEY_SEED_FILE).toBe("/creds/intake.nk");
  });

  it("requires the admin identity when the admin API is on", () => {
    const on = { ...IDENTITY, ZML_ADMIN_TOKEN: ADMIN_TOKEN };
    expect(() => loadConfig(on)).toThrow(/ZML_ADMIN_NATS_NKEY_SEED_FILE: required/);
    expect(loadConfig({ ...on, ...ADMIN_IDENTITY }).ZML_ADMIN_TOKEN).toBe(ADMIN_TOKEN);
  });
});

describe("listeners", { timeout: 30_000 }, () => {
  it("moves /metrics, /openapi.json and /admin off the public listener", async () => {
    const intake = await startIntake({
      config: { ZML_ADMIN_PORT: 0, ZML_ADMIN_HOST: "127.0.0.1" },
    });
    try {
      const pub = intake.url;
      const admin = intake.adminUrl!;
      expect(admin).not.toBe(pub);
      const auth = { authorization: `Bearer ${ADMIN_TOKEN}` };
      for (const path of ["/metrics", "/openapi.json", "/admin/v1/nodes"]) {
        expect((await fetch(`${pub}${path}`, { headers: auth })).status, path).toBe(404);
        expect((await fetch(`${admin}${path}`, { headers: auth })).status, path).toBe(200);
      }
      expect((await fetch(`${pub}/v1/models`)).status).toBe(401);
      expect((await fetch(`${admin}/v1/models`)).status).toBe(404);
      for (const url of [pub, admin]) expect((await fetch(`${url}/healthz`)).status).toBe(200);
    } finally {
      await intake.close();
    }
  });

  it("serves everything on one port without ZML_ADMIN_PORT", async () => {
    const intake = await startIntake();
    try {
      expect(intake.adminUrl).toBeUndefined();
      expect((await fetch(`${intake.url}/metrics`)).status).toBe(200);
    } finally {
      await intake.close();
    }
  });
});
