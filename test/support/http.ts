import { parseRoutingHeader, ROUTING_HTTP_HEADER } from "@zml/contracts";
import type { RoutingInfo } from "@zml/contracts";
import { request } from "undici";
import { authHeaders } from "./stack.ts";

export interface ChatResult {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  routing: RoutingInfo | undefined;
}

/** POSTs a chat completion to the gateway and reads the whole answer. */
export async function postChat(intakeUrl: string, body: unknown): Promise<ChatResult> {
  const res = await request(`${intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: authHeaders(),
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.body.text();
  const header = res.headers[ROUTING_HTTP_HEADER];
  return {
    status: res.statusCode,
    headers: res.headers,
    text,
    routing: typeof header === "string" ? parseRoutingHeader(header) : undefined,
  };
}

export function chat(model: string, extra: Record<string, unknown> = {}) {
  return { model, messages: [{ role: "user", content: "Say hello" }], ...extra };
}
