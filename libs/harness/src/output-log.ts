import type { Readable } from "node:stream";

export type OutputStream = "stdout" | "stderr";
type LineListener = (line: string, stream: OutputStream) => void;

/**
 * The last `maxLines` lines a child wrote to stdout and stderr, interleaved in arrival
 * order, with listeners for lines as they complete.
 */
export class OutputLog {
  readonly #maxLines: number;
  readonly #lines: string[] = [];
  readonly #listeners = new Set<LineListener>();

  constructor(maxLines: number) {
    this.#maxLines = maxLines;
  }

  /** Splits a stream into lines; a trailing partial line is kept until the stream ends. */
  attach(stream: Readable, name: OutputStream): void {
    let pending = "";
    stream.setEncoding("utf8");
    stream.on("data", (chunk: string) => {
      const parts = (pending + chunk).split(/\r?\n/);
      pending = parts.pop() ?? "";
      for (const line of parts) this.#push(line, name);
    });
    stream.on("end", () => {
      if (pending !== "") this.#push(pending, name);
      pending = "";
    });
  }

  lines(): readonly string[] {
    return this.#lines;
  }

  text(): string {
    return this.#lines.join("\n");
  }

  tail(count: number): string {
    return this.#lines.slice(-count).join("\n");
  }

  onLine(listener: LineListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #push(line: string, stream: OutputStream): void {
    this.#lines.push(line);
    if (this.#lines.length > this.#maxLines)
      this.#lines.splice(0, this.#lines.length - this.#maxLines);
    for (const listener of this.#listeners) listener(line, stream);
  }
}
