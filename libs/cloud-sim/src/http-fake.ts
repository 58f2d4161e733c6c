import { createServer } from "node:http";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * Faults a provider fake can be told to answer with, each for the next `times` requests
 * (`Infinity` until cleared):
 * - `throttle`: the provider's rate-limit error (EC2 `RequestLimitExceeded`, HTTP 429);
 * - `auth`: the provider's expired-credentials error (EC2 `AuthFailure`, HTTP 401);
 * - `malformed`: a 200 whose body is not the provider's format;
 * - `down`: a 503, as a provider outage or an unreachable proxy looks.
 */
export const CLOUD_FAULT_KINDS = ["throttle", "auth", "malformed", "down"] as const;
export type CloudFaultKind = (typeof CLOUD_FAULT_KINDS)[number];

/** What every provider fake offers beside its prices. */
export interface CloudFake {
  /** Base URL to point the provider client at. */
  readonly url: string;
  /** Makes the next `times` requests fail with `kind`. */
  fail(kind: CloudFaultKind, times?: number): void;
  /** Clears any fault. */
  heal(): void;
  /** Requests answered so far (every page counts), and how many of them with a fault. */
  stats(): { requests: number; faulted: number };
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** The part of a fake shared by the three providers: the server, faults and counters. */
export interface FakeCore {
  readonly url: string;
  /** The fault to answer this request with, consuming one of its `times`. */
  takeFault(): CloudFaultKind | undefined;
  readonly fake: Omit<CloudFake, "url">;
}

export type FakeHandler = (
  req: IncomingMessage,
  body: string,
  res: ServerResponse,
  core: FakeCore,
) => void;

/** Starts a fake on 127.0.0.1 (free port unless `port` is given). */
export async function startFakeServer(handler: FakeHandler, port = 0): Promise<FakeCore> {
  let fault: { kind: CloudFaultKind; left: number } | undefined;
  let requests = 0;
  let faulted = 0;
  const core: { url: string } & Omit<FakeCore, "url"> = {
    url: "",
    takeFault() {
      if (!fault || fault.left <= 0) return undefined;
      fault.left--;
      faulted++;
      return fault.kind;
    },
    fake: {
      fail(kind, times = 1) {
        fault = { kind, left: times };
      },
      heal() {
        fault = undefined;
      },
      stats: () => ({ requests, faulted }),
      close: () => close(server),
      [Symbol.asyncDispose]: () => close(server),
    },
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      requests++;
      try {
        handler(req, Buffer.concat(chunks).toString("utf8"), res, core);
      } catch (err) {
        res.writeHead(500, { "content-type": "text/plain" }).end(String(err));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  core.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return core;
}

function close(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

export function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { "content-type": type, "content-length": Buffer.byteLength(body) });
  res.end(body);
}
