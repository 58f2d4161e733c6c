import type { SimFault } from "./types.ts";

/**
 * Where a fault acts: on every received inference payload (`request`, before validation), on
 * valid requests while generating (`generation`), on health checks (`health`), on quote
 * requests (`quote`), or on the TLS server the moment it is set (`tls`, never held).
 */
export type FaultStage = "request" | "generation" | "health" | "quote" | "tls";

const STAGE_OF: Record<SimFault["kind"], FaultStage> = {
  status: "request",
  reset: "request",
  hang: "request",
  slow_first_token: "generation",
  cut_stream: "generation",
  stall_stream: "generation",
  malformed_chunk: "generation",
  health_fail: "health",
  relay: "quote",
  key_swap: "tls",
};

/** Holds the one active fault and counts down its `times`. */
export interface FaultSlot {
  /** The active fault with its remaining `times`, or null. */
  current(): SimFault | null;
  set(fault: SimFault | null): void;
  /** The active fault if it acts at `stage`, using up one of its `times`. */
  take(stage: FaultStage): SimFault | null;
}

export function createFaultSlot(): FaultSlot {
  let fault: SimFault | null = null;
  return {
    current: () => fault,
    set(next) {
      fault = next;
    },
    take(stage) {
      const active = fault;
      if (active === null || STAGE_OF[active.kind] !== stage) return null;
      if ("times" in active && active.times !== undefined) {
        fault = active.times > 1 ? { ...active, times: active.times - 1 } : null;
      }
      return active;
    },
  };
}
