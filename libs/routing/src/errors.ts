/** Stable codes of {@link RoutingError}. */
export const ROUTING_ERROR_CODES = {
  /** The live table was built for another snapshot; call `live.rebind(snapshot)`. */
  snapshotMismatch: "snapshot_mismatch",
} as const;
export type RoutingErrorCode = (typeof ROUTING_ERROR_CODES)[keyof typeof ROUTING_ERROR_CODES];

/** A programming error in how the routing core is called; never caused by a request. */
export class RoutingError extends Error {
  readonly code: RoutingErrorCode;
  readonly retryable = false;
  constructor(code: RoutingErrorCode, message: string) {
    super(message);
    this.name = "RoutingError";
    this.code = code;
  }
}
