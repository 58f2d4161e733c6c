import { X509Certificate } from "node:crypto";
import { request } from "node:https";
import { setTimeout as sleep } from "node:timers/promises";
import type { TLSSocket } from "node:tls";
import { parsePrometheusText } from "@zml/health";
import { spkiSha256 } from "@zml/tdx";

/** Polls `probe` until `accept` holds, failing with the last value after `timeoutMs`. */
export async function waitFor<T>(
  probe: () => T | Promise<T>,
  accept: (value: T) => boolean,
  what: string,
  timeoutMs = 5000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (accept(value)) return value;
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}; last value: ${JSON.stringify(value)}`);
    }
    await sleep(10);
  }
}

/** The `data:` payloads of a complete SSE text, in order. */
export function sseData(text: string): string[] {
  return text
    .split("\n\n")
    .filter((event) => event.startsWith("data: "))
    .map((event) => event.slice("data: ".length));
}

export const CHAT_BODY = {
  model: "llama-3-8b",
  messages: [{ role: "user", content: "Say something deterministic." }],
};

export function post(url: string, body: unknown, init: RequestInit = {}): Promise<Response> {
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
    ...init,
  });
}

/** A reader that collects an SSE stream as it arrives, for streams that never end. */
export function collectStream(response: Response): {
  text: () => string;
  ended: Promise<"done" | "error">;
} {
  let text = "";
  const decoder = new TextDecoder();
  const reader: ReadableStreamDefaultReader<Uint8Array> = response.body!.getReader();
  const ended = (async (): Promise<"done" | "error"> => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return "done";
        text += decoder.decode(value, { stream: true });
      }
    } catch {
      return "error";
    }
  })();
  return { text: () => text, ended };
}

/**
 * The value of one series in a Prometheus exposition: `series` is its name and labels as
 * written in the format (`x{a="1",b="2"}`), matched whatever order the text gives the labels.
 */
export function metricValue(text: string, series: string): number | undefined {
  const [wanted] = parsePrometheusText(`${series} 0`).series.values();
  const sample = wanted?.[0];
  if (sample === undefined) throw new Error(`not a series: ${series}`);
  const key = labelKey(sample.labels);
  return parsePrometheusText(text)
    .series.get(sample.name)
    ?.find((found) => labelKey(found.labels) === key)?.value;
}

function labelKey(labels: Readonly<Record<string, string>>): string {
  return JSON.stringify(Object.entries(labels).sort(([a], [b]) => a.localeCompare(b)));
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface ChatCompletion {
  id: string;
  object: string;
  created: number;
  model: string;
  system_fingerprint?: string;
  choices: { index: number; message: { role: string; content: string }; finish_reason: string }[];
  usage: Usage;
}

export interface TextCompletion {
  id: string;
  object: string;
  model: string;
  choices: { index: number; text: string; finish_reason: string }[];
  usage: Usage;
}

/** A chat or text completion chunk. */
export interface Chunk {
  id: string;
  object: string;
  model: string;
  choices: {
    index: number;
    delta?: { role?: string; content?: string };
    text?: string;
    finish_reason: string | null;
  }[];
  usage?: Usage | null;
}

export interface ErrorEnvelope {
  error: { message: string; type: string; param: string | null; code: number | string };
}

/** The JSON body of `res`, typed by the caller (the test's assertions check the shape). */
export async function readJson<T>(res: Response): Promise<T> {
  return (await res.json()) as T;
}

/** Parses the JSON `data:` payloads of a stream, `[DONE]` excluded. */
export function chunksOf(data: string[]): Chunk[] {
  return data.filter((d) => d !== "[DONE]").map((d) => JSON.parse(d) as Chunk);
}

/**
 * A request to a TLS sim node, which presents a self-signed certificate: any certificate is
 * taken, and the SHA-256 of the key it carried is returned with the answer.
 */
export async function tlsRequest(
  url: string,
  init: { method?: string; body?: string } = {},
): Promise<{ status: number; text: string; peerKeySha256: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: init.method ?? "GET",
        rejectUnauthorized: false,
        agent: false,
        headers: init.body === undefined ? {} : { "content-type": "application/json" },
      },
      (res) => {
        const peer = (res.socket as TLSSocket).getPeerCertificate();
        const peerKeySha256 = spkiSha256(new X509Certificate(peer.raw).publicKey);
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text, peerKeySha256 }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(init.body);
  });
}
