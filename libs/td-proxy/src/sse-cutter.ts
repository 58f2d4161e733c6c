// Cuts a server's SSE bytes into whole events (each with its closing blank line), so every
// event is sealed as one chunk and a client never opens half an event. Works on the bytes: an
// event inside one read is a view of that read, not a copy; only an event split across reads
// is joined.

const LF = 0x0a;
const CR = 0x0d;

export class SseCutter {
  private held: Buffer = Buffer.alloc(0);

  /** The events completed by these bytes. */
  push(bytes: Buffer): Buffer[] {
    const data = this.held.length === 0 ? bytes : Buffer.concat([this.held, bytes]);
    const events: Buffer[] = [];
    let start = 0;
    // An event ends at a blank line: LF or CRLF, then LF or CRLF.
    for (let lf = data.indexOf(LF, start); lf !== -1; lf = data.indexOf(LF, lf + 1)) {
      let end = -1;
      if (data[lf + 1] === LF) end = lf + 2;
      else if (data[lf + 1] === CR && data[lf + 2] === LF) end = lf + 3;
      if (end === -1) continue;
      events.push(data.subarray(start, end));
      start = end;
      lf = end - 1;
    }
    this.held = start === data.length ? Buffer.alloc(0) : Buffer.from(data.subarray(start));
    return events;
  }

  /** Whether what is left after the last whole event holds anything (a server that ended mid-event). */
  hasRest(): boolean {
    return this.held.toString("utf8").trim() !== "";
  }
}
