import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

/** One span as exported over OTLP/HTTP JSON, flattened. */
export interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, string | number | boolean>;
  events: Array<{ name: string; attributes: Record<string, string | number | boolean> }>;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
}
interface OtlpAttr {
  key: string;
  value: OtlpValue;
}

function attrs(list: OtlpAttr[] | undefined): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const a of list ?? []) {
    const v = a.value;
    out[a.key] =
      v.stringValue ??
      (v.intValue !== undefined ? Number(v.intValue) : undefined) ??
      v.doubleValue ??
      v.boolValue ??
      "";
  }
  return out;
}

/**
 * A real OTLP/HTTP receiver (JSON encoding, what the services' exporter sends) on a random
 * port. It keeps every span and every raw request body, so tests can both follow traces and
 * scan everything exported for things that must never be there.
 */
export async function startOtlpReceiver() {
  const spans: ReceivedSpan[] = [];
  const rawBodies: string[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      rawBodies.push(text);
      if (req.url === "/v1/traces") {
        try {
          const doc = JSON.parse(text) as {
            resourceSpans?: Array<{
              resource?: { attributes?: OtlpAttr[] };
              scopeSpans?: Array<{
                spans?: Array<{
                  traceId: string;
                  spanId: string;
                  parentSpanId?: string;
                  name: string;
                  kind: number;
                  attributes?: OtlpAttr[];
                  events?: Array<{ name: string; attributes?: OtlpAttr[] }>;
                }>;
              }>;
            }>;
          };
          for (const rs of doc.resourceSpans ?? []) {
            const service = String(attrs(rs.resource?.attributes)["service.name"] ?? "");
            for (const ss of rs.scopeSpans ?? []) {
              for (const s of ss.spans ?? []) {
                spans.push({
                  service,
                  traceId: s.traceId,
                  spanId: s.spanId,
                  parentSpanId: s.parentSpanId ?? "",
                  name: s.name,
                  kind: s.kind,
                  attributes: attrs(s.attributes),
                  events: (s.events ?? []).map((e) => ({
                    name: e.name,
                    attributes: attrs(e.attributes),
                  })),
                });
              }
            }
          }
        } catch {
          // not JSON: kept in rawBodies for the scans
        }
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    rawBodies,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
