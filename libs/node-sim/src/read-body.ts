import type { IncomingMessage } from "node:http";

export type BodyResult =
  { ok: true; body: Buffer } | { ok: false; reason: "too_large" | "aborted" };

/**
 * Reads the request body up to `limit` bytes. A larger body is read to its end without being
 * kept, so the client sees the 413 instead of a write error on a half-closed socket; one
 * that keeps going far past the limit is cut off.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<BodyResult> {
  return new Promise((resolve) => {
    const declared = Number(req.headers["content-length"]);
    let tooLarge = Number.isFinite(declared) && declared > limit;
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const settle = (result: BodyResult): void => {
      if (settled) return;
      settled = true;
      resolve(result);
    };
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) tooLarge = true;
      if (tooLarge) {
        chunks.length = 0;
        if (size > limit * 8) {
          req.socket.destroy();
          settle({ ok: false, reason: "aborted" });
        }
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => {
      if (tooLarge) settle({ ok: false, reason: "too_large" });
      else settle({ ok: true, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) });
    });
    req.on("error", () => settle({ ok: false, reason: "aborted" }));
    req.on("close", () => settle({ ok: false, reason: "aborted" }));
  });
}
