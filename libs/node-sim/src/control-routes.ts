import type { IncomingMessage, ServerResponse } from "node:http";
import type { FaultSlot } from "./fault-slot.ts";
import { methodNotAllowed, sendJson } from "./http-reply.ts";
import { readBody } from "./read-body.ts";
import type { RequestLedger } from "./request-ledger.ts";
import type { SimFault, SimRuntimeConfig } from "./types.ts";
import { parseSimFault, SimInputError } from "./validate.ts";

const CONTROL_BODY_LIMIT_BYTES = 64 * 1024;

/** What the control API acts on. */
export interface ControlDeps {
  faults: FaultSlot;
  /** Sets a checked fault or clears it (`null`); a key swap acts at once instead. */
  setFault(fault: SimFault | null): void;
  config: Readonly<SimRuntimeConfig>;
  /** Applies a run-time settings patch; throws {@link SimInputError} on an invalid one. */
  configure(patch: Partial<SimRuntimeConfig>): void;
  ledger: RequestLedger;
}

/** The `/_sim/*` control API: faults, run-time settings and stats (README, "Control API"). */
export interface ControlRoutes {
  /** `GET`, `PUT` or `DELETE /_sim/fault`. */
  fault(req: IncomingMessage, res: ServerResponse): Promise<void>;
  /** `GET` or `PUT /_sim/config`. */
  config(req: IncomingMessage, res: ServerResponse): Promise<void>;
  /** `GET /_sim/stats`. */
  stats(res: ServerResponse): void;
  /** `POST /_sim/reset-stats`: answers the stats after the reset. */
  resetStats(res: ServerResponse): void;
}

export function createControlRoutes(deps: ControlDeps): ControlRoutes {
  const { faults, ledger } = deps;
  return {
    async fault(req, res) {
      if (req.method === "GET") {
        sendJson(res, 200, JSON.stringify({ fault: faults.current() }));
      } else if (req.method === "DELETE") {
        faults.set(null);
        sendJson(res, 200, '{"fault":null}');
      } else if (req.method === "PUT") {
        const body = await readControlJson(req, res, "invalid_fault");
        if (!body.ok) return;
        try {
          deps.setFault(parseSimFault(body.value));
          sendJson(res, 200, JSON.stringify({ fault: faults.current() }));
        } catch (error) {
          if (!(error instanceof SimInputError)) throw error;
          sendControlError(res, error);
        }
      } else {
        methodNotAllowed(res);
      }
    },
    async config(req, res) {
      if (req.method === "GET") {
        sendJson(res, 200, JSON.stringify({ config: deps.config }));
      } else if (req.method === "PUT") {
        const body = await readControlJson(req, res, "invalid_config");
        if (!body.ok) return;
        try {
          deps.configure(body.value as Partial<SimRuntimeConfig>);
          sendJson(res, 200, JSON.stringify({ config: deps.config }));
        } catch (error) {
          if (!(error instanceof SimInputError)) throw error;
          sendControlError(res, error);
        }
      } else {
        methodNotAllowed(res);
      }
    },
    stats(res) {
      sendJson(res, 200, JSON.stringify(ledger.stats()));
    },
    resetStats(res) {
      ledger.reset();
      sendJson(res, 200, JSON.stringify(ledger.stats()));
    },
  };
}

/** A control body as JSON, or a 400 (or nothing, for a client gone) already answered. */
async function readControlJson(
  req: IncomingMessage,
  res: ServerResponse,
  code: SimInputError["code"],
): Promise<{ ok: true; value: unknown } | { ok: false }> {
  const read = await readBody(req, CONTROL_BODY_LIMIT_BYTES);
  if (!read.ok) {
    if (read.reason === "too_large") {
      sendControlError(res, new SimInputError(code, "control body too large", null));
    }
    return { ok: false };
  }
  try {
    return { ok: true, value: JSON.parse(read.body.toString("utf8")) as unknown };
  } catch {
    sendControlError(res, new SimInputError(code, "body: expected JSON", null));
    return { ok: false };
  }
}

function sendControlError(res: ServerResponse, error: SimInputError): void {
  const body = {
    error: {
      message: error.message,
      type: "invalid_request_error",
      param: error.field,
      code: error.code,
    },
  };
  sendJson(res, 400, JSON.stringify(body));
}
