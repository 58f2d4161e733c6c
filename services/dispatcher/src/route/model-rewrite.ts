/**
 * The body for a fallback model: the client's JSON with only `model` changed. This is the
 * one place the dispatcher re-serialises a body, and only on the fallback path.
 */
export function withModel(body: Uint8Array, model: string): Uint8Array {
  const text = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString("utf8");
  const doc = JSON.parse(text) as Record<string, unknown>;
  doc.model = model;
  return Buffer.from(JSON.stringify(doc));
}
