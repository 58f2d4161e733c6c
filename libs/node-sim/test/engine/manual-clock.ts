import type { EngineClock } from "../../src/engine/engine.ts";

/** An engine clock that moves only when told: timers run in time order, ties in set order. */
export interface ManualClock extends EngineClock {
  /** Runs every timer due up to `t`, each at its own time, then stops at `t`. */
  advanceTo(t: number): void;
  /**
   * Jumps to `t` first, then runs every timer due by then, all at `t`: timers that fire late,
   * as on a stalled event loop.
   */
  advanceLateTo(t: number): void;
  /** Runs timers until none is left (or `limit` have run). */
  runAll(limit?: number): void;
}

export function createManualClock(start = 0): ManualClock {
  let now = start;
  let order = 0;
  const timers: Array<{ at: number; order: number; fn: () => void; live: boolean }> = [];

  function next(): (typeof timers)[number] | undefined {
    let best: (typeof timers)[number] | undefined;
    for (const t of timers) {
      if (!t.live) continue;
      if (best === undefined || t.at < best.at || (t.at === best.at && t.order < best.order)) {
        best = t;
      }
    }
    return best;
  }

  function runOne(timer: (typeof timers)[number]): void {
    timer.live = false;
    timers.splice(timers.indexOf(timer), 1);
    now = Math.max(now, timer.at);
    timer.fn();
  }

  return {
    now: () => now,
    at(at, fn) {
      const timer = { at, order: order++, fn, live: true };
      timers.push(timer);
      return () => {
        timer.live = false;
      };
    },
    advanceTo(t) {
      for (let timer = next(); timer !== undefined && timer.at <= t; timer = next()) {
        runOne(timer);
      }
      now = Math.max(now, t);
    },
    advanceLateTo(t) {
      now = Math.max(now, t);
      for (let timer = next(); timer !== undefined && timer.at <= now; timer = next()) {
        runOne(timer);
      }
    },
    runAll(limit = 100_000) {
      for (let i = 0, timer = next(); timer !== undefined && i < limit; i++, timer = next()) {
        runOne(timer);
      }
    },
  };
}
