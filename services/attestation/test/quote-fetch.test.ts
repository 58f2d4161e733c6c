import { generateKeyPairSync } from "node:crypto";
import { once } from "node:events";
import type { RequestListener } from "node:http";
import { createServer } from "node:https";
import type { AddressInfo } from "node:net";
import { startSimNode } from "@zml/node-sim";
import { spkiSha256 } from "@zml/tdx";
import { createSelfSignedCertificate } from "@zml/tdx/testing";
import { afterEach, describe, expect, it } from "vitest";
import { fetchNodeQuote, QuoteFetchError, quoteUrl } from "../src/quote-fetch.ts";
import { collateral, MRTD, NONCE, testTee } from "./fixtures.ts";

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

const serverKey = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
const serverCert = createSelfSignedCertificate(serverKey, "test-server");

async function serve(handler: RequestListener): Promise<string> {
  const server = createServer(
    { key: serverKey.export({ type: "pkcs8", format: "pem" }), cert: serverCert.pem },
    handler,
  );
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  closers.push(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  return `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("fetchNodeQuote", () => {
  it("gets a quote and collateral from a TEE node over TLS, with the key it presented", async () => {
    const node = await startSimNode({
      nodeId: "tee-a",
      flavour: "vllm",
      models: ["m"],
      tee: testTee.nodeTee(),
    });
    closers.push(() => node.close());
    const { answer, tlsKeySha256 } = await fetchNodeQuote(`${node.url}/`, NONCE, 5_000);
    expect(tlsKeySha256).toBe(node.stats().tls_key_sha256);
    expect(answer.collateral).toEqual({ ...collateral });
    expect(Buffer.from(answer.quote_b64, "base64").includes(Buffer.from(NONCE, "hex"))).toBe(true);
    expect(node.stats()).toMatchObject({ quotes_served: 1, payloads_received: 0 });
  });

  it("builds the URL without doubling slashes", () => {
    expect(quoteUrl("http://n:1/", "ab")).toBe("http://n:1/attestation/quote?nonce=ab");
    expect(quoteUrl("http://n:1", "ab", { sessionKey: true })).toBe(
      "http://n:1/attestation/quote?nonce=ab&session_key=1",
    );
  });

  it("asks a TEE node for a session key when told to", async () => {
    const node = await startSimNode({
      nodeId: "tee-a",
      flavour: "vllm",
      models: ["m"],
      tee: { signer: testTee.signer, mrtd: MRTD },
    });
    closers.push(() => node.close());
    expect(
      (await fetchNodeQuote(node.url, NONCE, 5_000)).answer.session_public_key,
    ).toBeUndefined();
    const { answer } = await fetchNodeQuote(node.url, NONCE, 5_000, { sessionKey: true });
    expect(Buffer.from(answer.session_public_key!, "base64")).toHaveLength(44);
  });

  it.each([
    // A generous deadline where the answer, not the deadline, is what fails: on a loaded
    // machine the TLS handshake alone can take longer than 200 ms.
    ["a non-TEE node (404)", (_req, res) => res.writeHead(404).end("{}"), /answered 404/, 10_000],
    ["a body that is not JSON", (_req, res) => res.end("<html>"), /not JSON/, 10_000],
    [
      "JSON without a quote",
      (_req, res) => res.end('{"quote":"x"}'),
      /malformed: quote_b64/,
      10_000,
    ],
    [
      "an oversized answer",
      (_req, res) => res.end(JSON.stringify({ quote_b64: "A".repeat(2 * 1024 * 1024) })),
      /exceeds/,
      10_000,
    ],
    ["no answer in time", () => undefined, /no answer within 200 ms/, 200],
  ] satisfies Array<[string, RequestListener, RegExp, number]>)(
    "fails on %s",
    async (_what, handler, message, timeoutMs) => {
      const url = await serve(handler);
      const error = await fetchNodeQuote(url, NONCE, timeoutMs).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(QuoteFetchError);
      expect((error as QuoteFetchError).code).toBe("quote_unavailable");
      expect((error as Error).message).toMatch(message);
    },
  );

  it("reports the key of any server certificate, chained or not", async () => {
    const url = await serve((_req, res) => res.end(JSON.stringify({ quote_b64: "AAAA" })));
    expect((await fetchNodeQuote(url, NONCE, 2_000)).tlsKeySha256).toBe(spkiSha256(serverKey));
  });

  it("refuses an endpoint that is not https:// without connecting", async () => {
    const error = await fetchNodeQuote("http://127.0.0.1:1", NONCE, 2_000).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "tls_required", retryable: false });
  });

  it("fails on a refused connection", async () => {
    const url = await serve(() => undefined);
    await Promise.all(closers.splice(0).map((close) => close()));
    await expect(fetchNodeQuote(url, NONCE, 2_000)).rejects.toBeInstanceOf(QuoteFetchError);
  });
});
