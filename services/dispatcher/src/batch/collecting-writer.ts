import type { ReplyWriter } from "@zml/bus";
import type { ErrorBody } from "@zml/contracts";

/** What a job's execution produced, gathered in memory for the results stream. */
export interface CollectedReply {
  status: number | null;
  contentType: string;
  routing: string;
  chunks: Uint8Array[];
  error: ErrorBody | null;
}

/** A ReplyWriter that keeps the answer instead of sending it, for batch jobs. */
export type CollectingWriter = ReplyWriter & { reply(): CollectedReply };

export function createCollectingWriter(): CollectingWriter {
  const collected: CollectedReply = {
    status: null,
    contentType: "application/json",
    routing: "",
    chunks: [],
    error: null,
  };
  return {
    full(status, contentType, routing, body) {
      Object.assign(collected, { status, contentType, routing });
      collected.chunks.push(body);
    },
    head(status, contentType, routing) {
      Object.assign(collected, { status, contentType, routing });
    },
    chunk(data) {
      collected.chunks.push(data);
    },
    end() {},
    error(body, routing) {
      collected.error = body;
      if (routing) collected.routing = routing;
    },
    reply: () => collected,
  };
}
