import type { DestinationStream } from "pino";

/** A pino destination that keeps every line so a test can read what was logged. */
export function captureStream(): DestinationStream & {
  lines: () => Record<string, unknown>[];
  text: () => string;
} {
  const chunks: string[] = [];
  return {
    write(chunk: string) {
      chunks.push(chunk);
    },
    text: () => chunks.join(""),
    lines: () =>
      chunks
        .join("")
        .split("\n")
        .filter((line) => line.length > 0)
        .map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}
