/** Where a reading came from, for error messages. */
export type ReadingSource = "vllm" | "tgi" | "llamacpp" | "sglang" | "custom";

/**
 * A node's metrics or health document could not be turned into a reading: unparseable
 * text, required series missing, or a custom health document that fails validation. A probe
 * that meets this error counts as a failed probe; the next poll may succeed.
 */
export class MetricsReadError extends Error {
  readonly code = "metrics_unreadable";
  readonly retryable = true;
  readonly source: ReadingSource;
  /** Series (or, for custom health, fields) that were missing or unusable. */
  readonly missing: readonly string[];
  constructor(source: ReadingSource, message: string, missing: readonly string[] = []) {
    super(message);
    this.name = "MetricsReadError";
    this.source = source;
    this.missing = missing;
  }
}

/** An observation was applied to the health of a different node: a wiring bug. */
export class NodeMismatchError extends Error {
  readonly code = "node_mismatch";
  readonly retryable = false;
  readonly expected: string;
  readonly actual: string;
  constructor(expected: string, actual: string) {
    super(
      `observation for node ${JSON.stringify(actual)} applied to node ${JSON.stringify(expected)}`,
    );
    this.name = "NodeMismatchError";
    this.expected = expected;
    this.actual = actual;
  }
}
