import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { once } from "node:events";
import { OutputLog } from "./output-log.ts";
import type { OutputStream } from "./output-log.ts";
import { pollUntil, PollTimeoutError } from "./poll.ts";

const MAX_LINES = 2000;
const TAIL_IN_MESSAGE = 40;

export interface StartProcessOptions {
  /** Label for output echo and errors, e.g. `"dispatcher"`. */
  name: string;
  command: string;
  args: string[];
  /** Added on top of the parent's environment. */
  env?: Record<string, string>;
  cwd?: string;
  /** Ready once a GET to this URL answers 200. */
  readyUrl?: string;
  /** Ready once a stdout/stderr line matches. With `readyUrl`, both must hold. */
  readyLine?: RegExp;
  /** Default 30 000 ms. */
  readyTimeoutMs?: number;
  /** Copy the child's output to this process's stdout/stderr, each line prefixed `[name]`. */
  echo?: boolean;
  /** Called with every complete line the child writes. */
  onOutput?: (line: string, stream: OutputStream) => void;
}

export interface ManagedProcess {
  readonly name: string;
  readonly pid: number;
  /** The last ~2000 lines of stdout and stderr, interleaved. */
  output(): string;
  /**
   * Resolves with the first line (already written or still to come) matching `re`.
   * Rejects with {@link ProcessExitedError} if the process ends first, or
   * {@link ProcessTimeoutError} after `timeoutMs` (default 10 000 ms).
   */
  waitForOutput(re: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  /** Sends `signal` (default SIGTERM), then SIGKILL after `graceMs` (default 5000 ms); resolves with the exit code, null when killed by a signal. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<number | null>;
  /** SIGKILL, resolved once the process is gone. */
  kill(): Promise<void>;
  /** Settles when the process has exited and its output is fully read. */
  readonly exited: Promise<number | null>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A managed process ended while something was still waiting on it. */
export class ProcessExitedError extends Error {
  readonly code = "process_exited";
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  /** The captured output tail. */
  readonly output: string;
  constructor(
    name: string,
    exitCode: number | null,
    signal: NodeJS.Signals | null,
    output: string,
    waitingFor: string,
  ) {
    const how = signal === null ? `code ${String(exitCode)}` : `signal ${signal}`;
    super(`${name} exited (${how}) while waiting for ${waitingFor}; output tail:\n${output}`);
    this.name = "ProcessExitedError";
    this.exitCode = exitCode;
    this.signal = signal;
    this.output = output;
  }
}

/** A managed process did not become ready, or print what was awaited, in time. */
export class ProcessTimeoutError extends Error {
  readonly code = "process_timeout";
  /** The captured output tail. */
  readonly output: string;
  constructor(
    name: string,
    waitingFor: string,
    timeoutMs: number,
    output: string,
    cause?: unknown,
  ) {
    super(
      `${name}: no ${waitingFor} within ${timeoutMs} ms; output tail:\n${output}`,
      cause === undefined ? undefined : { cause },
    );
    this.name = "ProcessTimeoutError";
    this.output = output;
  }
}

// Children still running when the test runner or launcher exits are killed with it.
const live = new Set<ChildProcess>();
let exitHookInstalled = false;
function track(child: ChildProcess): void {
  live.add(child);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once("exit", () => {
    for (const c of live) c.kill("SIGKILL");
  });
}

function nonGlobal(re: RegExp): RegExp {
  return re.global || re.sticky ? new RegExp(re.source, re.flags.replace(/[gy]/g, "")) : re;
}

async function probeHttp(url: string): Promise<boolean> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
  await res.body?.cancel();
  return res.status === 200;
}

/**
 * Spawns a long-running child (a service, a simulated node, a server), captures its output
 * and resolves once it is ready: when `readyUrl` answers 200 and/or `readyLine` is printed,
 * or at once when neither is given.
 *
 * If the child exits or is not ready in time, it is killed and the promise rejects with
 * {@link ProcessExitedError} or {@link ProcessTimeoutError}, whose message carries the
 * child's output tail. Spawn failures (e.g. ENOENT) reject with Node's own error.
 */
export async function startProcess(options: StartProcessOptions): Promise<ManagedProcess> {
  const { name } = options;
  const child = spawn(options.command, options.args, {
    cwd: options.cwd,
    env: { ...process.env, ...options.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const log = new OutputLog(MAX_LINES);
  log.attach(child.stdout, "stdout");
  log.attach(child.stderr, "stderr");
  if (options.echo) {
    log.onLine((line, stream) => {
      (stream === "stdout" ? process.stdout : process.stderr).write(`[${name}] ${line}\n`);
    });
  }
  if (options.onOutput) log.onLine(options.onOutput);

  let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  const exitListeners = new Set<() => void>();
  const exited = new Promise<number | null>((resolve) => {
    // 'close' rather than 'exit': it fires after stdout/stderr are drained.
    child.once("close", (code, signal) => {
      exit = { code, signal };
      live.delete(child);
      for (const listener of exitListeners) listener();
      resolve(code);
    });
  });

  await once(child, "spawn");
  track(child);
  const pid = child.pid ?? -1;
  const tail = () => log.tail(TAIL_IN_MESSAGE);
  const exitedError = (waitingFor: string) =>
    new ProcessExitedError(name, exit?.code ?? null, exit?.signal ?? null, tail(), waitingFor);

  const waitForOutput = (re: RegExp, timeoutMs = 10_000): Promise<RegExpMatchArray> => {
    const pattern = nonGlobal(re);
    for (const line of log.lines()) {
      const match = line.match(pattern);
      if (match) return Promise.resolve(match);
    }
    if (exit) return Promise.reject(exitedError(`output ${String(re)}`));
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        stopListening();
        exitListeners.delete(onExit);
      };
      const stopListening = log.onLine((line) => {
        const match = line.match(pattern);
        if (!match) return;
        done();
        resolve(match);
      });
      const onExit = () => {
        done();
        reject(exitedError(`output ${String(re)}`));
      };
      exitListeners.add(onExit);
      const timer = setTimeout(() => {
        done();
        reject(new ProcessTimeoutError(name, `output ${String(re)}`, timeoutMs, tail()));
      }, timeoutMs);
    });
  };

  const stop = async (
    signal: NodeJS.Signals = "SIGTERM",
    graceMs = 5000,
  ): Promise<number | null> => {
    if (exit) return exit.code;
    child.kill(signal);
    let timer: NodeJS.Timeout | undefined;
    const graceOver = new Promise<"grace_over">((resolve) => {
      timer = setTimeout(() => resolve("grace_over"), graceMs);
    });
    const first = await Promise.race([exited, graceOver]);
    clearTimeout(timer);
    if (first === "grace_over") child.kill("SIGKILL");
    return exited;
  };

  const managed: ManagedProcess = {
    name,
    pid,
    output: () => log.text(),
    waitForOutput,
    stop,
    kill: async () => {
      if (!exit) child.kill("SIGKILL");
      await exited;
    },
    exited,
    [Symbol.asyncDispose]: async () => {
      await stop();
    },
  };

  const timeoutMs = options.readyTimeoutMs ?? 30_000;
  const readiness = new AbortController();
  const exitedEarly = exited.then(() => {
    throw exitedError("readiness");
  });
  exitedEarly.catch(() => undefined); // only matters while racing readiness below
  try {
    await Promise.race([
      waitUntilReady(managed, options, timeoutMs, readiness.signal),
      exitedEarly,
    ]);
  } catch (error) {
    await managed.kill();
    if (error instanceof PollTimeoutError) {
      throw new ProcessTimeoutError(name, `200 from ${options.readyUrl}`, timeoutMs, tail(), error);
    }
    throw error;
  } finally {
    readiness.abort();
  }
  return managed;
}

function waitUntilReady(
  proc: ManagedProcess,
  options: StartProcessOptions,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<unknown> {
  const waits: Promise<unknown>[] = [];
  if (options.readyLine) waits.push(proc.waitForOutput(options.readyLine, timeoutMs));
  const { readyUrl } = options;
  if (readyUrl !== undefined) {
    waits.push(
      pollUntil(() => probeHttp(readyUrl), {
        timeoutMs,
        intervalMs: 50,
        message: `200 from ${readyUrl}`,
        signal,
      }),
    );
  }
  return Promise.all(waits);
}
