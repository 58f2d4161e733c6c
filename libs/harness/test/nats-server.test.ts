import { existsSync, readFileSync } from "node:fs";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  findFreePort,
  findNatsServerBinary,
  NatsServerUnavailableError,
  startNatsServer,
  UnknownHarnessIdentityError,
} from "../src/index.ts";
import type { NatsServerHandle } from "../src/index.ts";
import { rawConnect, readInfoLine } from "./raw-nats.ts";

// Force a server the harness owns, whatever NATS_URL the environment carries.
const OWN = { env: { PATH: process.env.PATH } };

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

describe("startNatsServer", { timeout: 30_000 }, () => {
  const started: NatsServerHandle[] = [];
  afterEach(async () => {
    await Promise.all(started.splice(0).map((s) => s.stop()));
  });
  async function start(options: Parameters<typeof startNatsServer>[0] = {}) {
    const handle = await startNatsServer({ ...OWN, ...options });
    started.push(handle);
    return handle;
  }

  it("starts a real server with JetStream and the default 8MB payload limit", async () => {
    const nats = await start();
    expect(nats.url).toBe(`nats://127.0.0.1:${nats.port}`);
    const line = await readInfoLine("127.0.0.1", nats.port);
    expect(line.startsWith("INFO {")).toBe(true);
    const info = JSON.parse(line.slice(5)) as Record<string, unknown>;
    expect(info).toMatchObject({ port: nats.port, jetstream: true, max_payload: 8 * 1024 * 1024 });
  });

  it("uses the requested port and payload limit, and passes log lines on", async () => {
    const port = await findFreePort();
    const lines: string[] = [];
    // Open: the raw protocol client below speaks neither TLS nor nkeys.
    const nats = await start({
      port,
      maxPayload: "1MB",
      security: "open",
      log: (line) => lines.push(line),
    });
    expect(nats.port).toBe(port);
    const conn = await rawConnect("127.0.0.1", port);
    conn.close();
    expect(conn.info.max_payload).toBe(1024 * 1024);
    expect(lines.some((l) => l.includes("Server is ready"))).toBe(true);
  });

  it("restarts on the same port with the JetStream store intact", async () => {
    const nats = await start({ security: "open" });
    const { port, url, storeDir } = nats;

    const before = await rawConnect("127.0.0.1", port);
    const created = JSON.parse(
      await before.request(
        "$JS.API.STREAM.CREATE.ORDERS",
        JSON.stringify({ name: "ORDERS", subjects: ["orders.>"], storage: "file" }),
      ),
    ) as Record<string, unknown>;
    expect(created.error).toBeUndefined();
    const ack = JSON.parse(await before.request("orders.1", '{"id":1}')) as Record<string, unknown>;
    expect(ack).toMatchObject({ stream: "ORDERS", seq: 1 });
    before.close();

    await nats.restart();
    expect(nats.port).toBe(port);
    expect(nats.url).toBe(url);
    expect(nats.storeDir).toBe(storeDir);

    const after = await rawConnect("127.0.0.1", port);
    const info = JSON.parse(await after.request("$JS.API.STREAM.INFO.ORDERS", "")) as {
      error?: unknown;
      state?: { messages: number };
    };
    after.close();
    expect(info.error).toBeUndefined();
    expect(info.state?.messages).toBe(1);
  });

  it("is secured by default: nkey auth and TLS required, an identity per service", async () => {
    const nats = await start();
    const info = JSON.parse((await readInfoLine("127.0.0.1", nats.port)).slice(5)) as Record<
      string,
      unknown
    >;
    expect(info).toMatchObject({ auth_required: true, tls_required: true });
    expect(typeof info.nonce).toBe("string"); // nkey challenge
    expect(nats.secure).toBe(true);
    const intake = nats.client("intake");
    expect(intake).toMatchObject({ servers: nats.url, inboxPrefix: "_INBOX_intake" });
    expect(readFileSync(intake.nkeySeedFile!, "utf8")).toMatch(/^SU[A-Z2-7]{56}\n$/);
    expect(readFileSync(intake.caFile!, "utf8")).toContain("BEGIN CERTIFICATE");
    expect(nats.serviceEnv("dispatcher")).toEqual({
      NATS_URL: nats.url,
      NATS_NKEY_SEED_FILE: nats.client("dispatcher").nkeySeedFile,
      NATS_CA_FILE: intake.caFile,
    });
    expect(nats.client("batch-e2e").inboxPrefix).toBe("_INBOX_batch-e2e");
    expect(() => nats.client("nobody")).toThrow(UnknownHarnessIdentityError);
  });

  it("open on request: no auth, no TLS, and services told to run insecure", async () => {
    const nats = await start({ security: "open" });
    const info = JSON.parse((await readInfoLine("127.0.0.1", nats.port)).slice(5)) as Record<
      string,
      unknown
    >;
    expect(info.auth_required).toBeUndefined();
    expect(nats.secure).toBe(false);
    expect(nats.serviceEnv("intake")).toEqual({ NATS_URL: nats.url, NATS_INSECURE: "1" });
  });

  it("frees the port and removes its temp store on stop", async () => {
    const nats = await start();
    expect(existsSync(nats.storeDir)).toBe(true);
    await nats.stop();
    expect(await canBind(nats.port)).toBe(true);
    await expect(readInfoLine("127.0.0.1", nats.port)).rejects.toThrow(/ECONNREFUSED/);
    expect(existsSync(nats.storeDir)).toBe(false);
  });

  it("keeps a store dir it was given", async () => {
    const storeDir = await mkdtemp(join(tmpdir(), "zml-nats-test-store-"));
    try {
      const nats = await start({ storeDir });
      expect(nats.storeDir).toBe(storeDir);
      await nats.stop();
      expect(existsSync(join(storeDir, "jetstream"))).toBe(true);
    } finally {
      await rm(storeDir, { recursive: true, force: true });
    }
  });

  it("uses NATS_URL when set, without starting anything", async () => {
    const nats = await startNatsServer({ env: { NATS_URL: "nats://10.1.2.3:4333" } });
    expect(nats).toMatchObject({ url: "nats://10.1.2.3:4333", port: 4333 });
    await expect(nats.restart()).rejects.toBeInstanceOf(NatsServerUnavailableError);
    await expect(nats.restart()).rejects.toMatchObject({ code: "nats_unavailable" });
    await nats.stop();
  });
});

describe("findNatsServerBinary", () => {
  it("searches PATH before the fixed install dirs", async () => {
    const dir = await mkdtemp(join(tmpdir(), "zml-fake-bin-"));
    try {
      const fake = join(dir, "nats-server");
      await writeFile(fake, "#!/bin/sh\n");
      await chmod(fake, 0o755);
      expect(findNatsServerBinary({ PATH: dir })).toBe(fake);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("ignores files that are not executable", async () => {
    const dir = await mkdtemp(join(tmpdir(), "zml-fake-bin-"));
    try {
      await writeFile(join(dir, "nats-server"), "");
      expect(findNatsServerBinary({ PATH: dir })).not.toBe(join(dir, "nats-server"));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
