import { pollUntil } from "@zml/harness";
import type { ManagedProcess } from "@zml/harness";
import { request } from "undici";

/** The ops URL a service printed in its ready line (`"ops":"http://…"`). */
export function opsUrlOf(proc: ManagedProcess): string {
  const match = /"ops":"(http:\/\/[^"]+)"/.exec(proc.output());
  if (!match?.[1]) throw new Error(`${proc.name} printed no ops URL`);
  return match[1];
}

/** `GET /readyz` → its status code, or null when nothing answers any more. */
export async function readyStatus(url: string): Promise<number | null> {
  try {
    const res = await request(`${url}/readyz`, { headersTimeout: 2_000, bodyTimeout: 2_000 });
    await res.body.text();
    return res.statusCode;
  } catch {
    return null;
  }
}

export interface GracefulStopReport {
  exitCode: number | null;
  /** When `/readyz` first answered 503 after the signal (undefined: it never did). */
  notReadyAt: number | undefined;
  exitedAt: number;
}

/**
 * Sends SIGTERM to a service and watches its readiness until it exits: the caller checks
 * that readiness failed before the process ended, and with which exit code it ended.
 */
export async function terminateAndWatch(
  proc: ManagedProcess,
  readyUrl: string,
): Promise<GracefulStopReport> {
  let exited = false;
  let exitedAt = 0;
  const exit = proc.exited.then((code) => {
    exited = true;
    exitedAt = Date.now();
    return code;
  });
  process.kill(proc.pid, "SIGTERM");
  let notReadyAt: number | undefined;
  await pollUntil(
    async () => {
      if (notReadyAt === undefined && (await readyStatus(readyUrl)) === 503) {
        notReadyAt = Date.now();
      }
      return exited;
    },
    { timeoutMs: 40_000, intervalMs: 20, message: `${proc.name} to exit after SIGTERM` },
  );
  return { exitCode: await exit, notReadyAt, exitedAt };
}

/** Lines that mean a stop was not clean: crashes and closed-connection errors. */
export function uncleanStopLines(output: string): string[] {
  return output
    .split("\n")
    .filter((l) =>
      /ClosedConnectionError|CONNECTION_CLOSED|Unhandled|uncaught|shutdown failed|took too long/i.test(
        l,
      ),
    );
}
