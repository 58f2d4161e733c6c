import { publishJson } from "@zml/bus";
import type { Bus, BusLogger } from "@zml/bus";
import { DISPATCHER_ALIVE_SUBJECT, DispatcherAliveSchema } from "@zml/contracts";

/**
 * This replica's liveness beats on `zml.dispatcher.alive`: one small message every
 * `intervalMs` while it runs, whatever the traffic. Intake follows the beats of the replicas
 * that accepted its requests; beats that stop (a killed process, a lost connection) end
 * those requests in about a second, and `leave()` ends them at once.
 */
export interface LivenessBeats {
  /** Stops beating and says so (`leaving: true`): what this replica still serves is over. */
  leave(): void;
}

export function startLivenessBeats(
  bus: Bus,
  options: { replica: string; intervalMs: number; log: BusLogger },
): LivenessBeats {
  const beat = (leaving: boolean) => {
    // A beat while reconnecting would only queue up; the next one after reconnecting counts.
    if (!bus.isConnected()) return;
    try {
      publishJson(bus, DISPATCHER_ALIVE_SUBJECT, DispatcherAliveSchema, {
        type: "dispatcher.alive.v1",
        replica: options.replica,
        interval_ms: options.intervalMs,
        ...(leaving ? { leaving: true } : {}),
      });
    } catch (err) {
      options.log.warn({ err: String(err) }, "liveness beat not sent");
    }
  };
  beat(false);
  const timer = setInterval(() => beat(false), options.intervalMs);
  timer.unref();
  return {
    leave() {
      clearInterval(timer);
      beat(true);
    },
  };
}
