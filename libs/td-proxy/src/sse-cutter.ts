// Cuts a server's SSE bytes into whole events (each with its closing blank line), so every
// event is sealed as one chunk and a client never opens half an event.

const BLANK_LINE = /\r?\n\r?\n/g;

export class SseCutter {
  private held = "";
  private readonly decoder = new TextDecoder();

  /** The events completed by these bytes. */
  push(bytes: Uint8Array): string[] {
    this.held += this.decoder.decode(bytes, { stream: true });
    const events: string[] = [];
    let start = 0;
    BLANK_LINE.lastIndex = 0;
    for (let m = BLANK_LINE.exec(this.held); m !== null; m = BLANK_LINE.exec(this.held)) {
      const end = m.index + m[0].length;
      events.push(this.held.slice(start, end));
      start = end;
    }
    this.held = this.held.slice(start);
    return events;
  }

  /** What is left after the last whole event (a server that ended mid-event). */
  rest(): string {
    return this.held + this.decoder.decode();
  }
}
