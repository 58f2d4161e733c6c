// Cuts a server's SSE bytes into whole events (each with its closing blank line), so every
// event is sealed as one chunk and a client never opens half an event. The cutting is the
// shared cutter's (`@zml/contracts/sse`): an event inside one read is a view of that read, not
// a copy; only an event split across reads is joined.

import { SseEventCutter, splitEvents } from "@zml/contracts";

export class SseCutter {
  /**
   * No bound on one event's bytes: every event is sealed whole, and the answer's size as a
   * whole is bounded by the caller (`maxAnswerBytes`).
   */
  private readonly cutter = new SseEventCutter({ maxHeldBytes: Infinity });

  /** The events completed by these bytes. */
  push(bytes: Buffer): Buffer[] {
    const run = this.cutter.push(bytes);
    return run === null ? [] : splitEvents(run);
  }

  /** Whether what is left after the last whole event holds anything (a server that ended mid-event). */
  hasRest(): boolean {
    return (this.cutter.peekPending()?.toString("utf8").trim() ?? "") !== "";
  }
}
