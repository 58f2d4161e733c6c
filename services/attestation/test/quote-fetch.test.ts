import { once } from "node:events";
import { createServer } from "node:http";
import type { RequestListener } from "node:http";
import type { AddressInfo } from "node:net";
import { startSimNode } from "@zml/node-sim";
import { afterEach, describe, expect, it } from "vitest";
import { fetchNodeQuote, QuoteFetchError, quoteUrl } from "../src/quote-fetch.ts";
import { collateral, MRTD, NONCE, pki } from "./fixtures.ts";

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

async function serve(handler: RequestListener): Promise<string> {
  const server = createServer(handler);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  closers.push(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("fetchNodeQuote", () => {
  it("gets a quote and collateral from a TEE node for the nonce", async () => {
    const node = await startSimNode({
      nodeId: "tee-a",
      flavour: "vllm",
      models: ["m"],
      tee: {
        signer: { pckChainPem: pki.pckChainPem, pckKey: pki.pck.key },
        mrtd: MRTD,
        collateral: { ...collateral },
      },
    });
    closers.push(() => node.close());
    const answer = await fetchNodeQuote(`${node.url}/`, NONCE, 5_000);
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
      tee: { signer: { pckChainPem: pki.pckChainPem, pckKey: pki.pck.key }, mrtd: MRTD },
    });
    closers.push(() => node.close());
    expect((await fetchNodeQuote(node.url, NONCE, 5_000)).session_public_key).toBeUndefined();
    const answer = await fetchNodeQuote(node.url, NONCE, 5_000, { sessionKey: true });
    expect(Buffer.from(answer.session_public_key!, "base64")).toHaveLength(44);
  });

  it.each([
    ["a non-TEE node (404)", (_req, res) => res.writeHead(404).end("{}"), /answered 404/],
    ["a body that is not JSON", (_req, res) => res.end("<html>"), /not JSON/],
    ["JSON without a quote", (_req, res) => res.end('{"quote":"x"}'), /malformed: quote_b64/],
    [
      "an oversized answer",
      (_req, res) => res.end(JSON.stringify({ quote_b64: "A".repeat(2 * 1024 * 1024) })),
      /exceeds/,
    ],
    ["no answer in time", () => undefined, /no answer within 200 ms/],
  ] satisfies Array<[string, RequestListener, RegExp]>)(
    "fails on %s",
    async (_what, handler, message) => {
      const url = await serve(handler);
      const error = await fetchNodeQuote(url, NONCE, 200).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(QuoteFetchError);
      expect((error as QuoteFetchError).code).toBe("quote_unavailable");
      expect((error as Error).message).toMatch(message);
    },
  );

  it("fails on a refused connection", async () => {
    const url = await serve(() => undefined);
    await Promise.all(closers.splice(0).map((close) => close()));
    await expect(fetchNodeQuote(url, NONCE, 2_000)).rejects.toBeInstanceOf(QuoteFetchError);
  });
});
