import { generateKeyPairSync } from "node:crypto";
import { once } from "node:events";
import { createServer } from "node:https";
import type { Server } from "node:https";
import type { AddressInfo } from "node:net";
import { spkiSha256 } from "@zml/tdx";
import { createSelfSignedCertificate } from "@zml/tdx/testing";
import { Pool } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pinnedConnector, TlsKeyMismatchError } from "../src/node/pinned-connector.ts";

const key = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
const KEY_SHA256 = spkiSha256(key);
let server: Server;
let origin: string;
let bytesReceived = 0;
let requests = 0;

beforeAll(async () => {
  server = createServer(
    {
      key: key.export({ type: "pkcs8", format: "pem" }),
      cert: createSelfSignedCertificate(key, "n").pem,
    },
    (req, res) => {
      requests += 1;
      req.resume();
      req.on("end", () => res.end("ok"));
    },
  );
  // Counts every decrypted byte a client sends, requests or not.
  server.on("secureConnection", (socket) => {
    socket.on("data", (chunk: Buffer) => (bytesReceived += chunk.length));
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  origin = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

function pool(pin: () => string | undefined, mismatches: Array<string | null>): Pool {
  return new Pool(origin, {
    connect: pinnedConnector({
      nodeId: "tee-a",
      pin,
      onMismatch: (_node, seen) => mismatches.push(seen),
      timeoutMs: 2_000,
    }),
  });
}

const post = (p: Pool) =>
  p.request({ path: "/v1/chat/completions", method: "POST", body: '{"secret":"prompt"}' });

describe("pinnedConnector", () => {
  it("sends the request when the node presents the pinned key", async () => {
    const mismatches: Array<string | null> = [];
    const p = pool(() => KEY_SHA256, mismatches);
    const res = await post(p);
    expect(await res.body.text()).toBe("ok");
    expect(mismatches).toEqual([]);
    await p.close();
  });

  it("refuses a connection with another key before a byte of the request is sent", async () => {
    const before = { bytes: bytesReceived, requests };
    const mismatches: Array<string | null> = [];
    const p = pool(() => "00".repeat(32), mismatches);
    const error = await post(p).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TlsKeyMismatchError);
    expect(error).toMatchObject({ code: "tls_key_mismatch", seen: KEY_SHA256 });
    expect(mismatches).toEqual([KEY_SHA256]);
    await p.close();
    expect(requests).toBe(before.requests);
    expect(bytesReceived).toBe(before.bytes);
  });

  it("refuses every connection without a pin, and plain http", async () => {
    const mismatches: Array<string | null> = [];
    const p = pool(() => undefined, mismatches);
    await expect(post(p)).rejects.toMatchObject({ code: "tls_key_mismatch", seen: null });
    expect(mismatches).toEqual([]); // nothing attested: nothing to re-attest
    await p.close();
    const plain = new Pool(origin.replace("https:", "http:"), {
      connect: pinnedConnector({
        nodeId: "tee-a",
        pin: () => KEY_SHA256,
        onMismatch: () => undefined,
        timeoutMs: 2_000,
      }),
    });
    await expect(post(plain)).rejects.toBeInstanceOf(TlsKeyMismatchError);
    await plain.close();
  });
});
