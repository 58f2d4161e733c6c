// Linux /proc readings for the processes under test: resident memory and CPU time.
import { readdirSync, readFileSync } from "node:fs";

/** USER_HZ: the unit of utime/stime in /proc/<pid>/stat; 100 on every mainstream Linux. */
const CLOCK_TICKS_PER_S = 100;

export interface Memory {
  /** Resident set size now (VmRSS), in MiB. */
  rssMiB: number;
  /** Peak resident set size (VmHWM), in MiB. */
  peakMiB: number;
}

/** VmRSS and VmHWM of a live process, or undefined when it is gone. */
export function memoryOf(pid: number): Memory | undefined {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return undefined;
  }
  const kib = (field: string) => {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status);
    return match ? Number(match[1]) / 1024 : Number.NaN;
  };
  return { rssMiB: kib("VmRSS"), peakMiB: kib("VmHWM") };
}

/**
 * CPU time a process has used so far, in ms, to the nanosecond: the sum of its threads'
 * on-CPU time (`/proc/<pid>/task/<tid>/schedstat`, the scheduler's own count). utime + stime
 * of `/proc/<pid>/stat` come in 10 ms ticks, too coarse for the few hundred µs a request
 * costs a process over a round of half a second. Time of threads that exited is not in the
 * sum (a Node process's and nats-server's threads live as long as the process); without
 * schedstat it falls back to the ticks.
 */
export function cpuMsOf(pid: number): number {
  let ns = 0;
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const line = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8");
      ns += Number(line.slice(0, line.indexOf(" ")));
    }
  } catch {
    return cpuTicksMsOf(pid);
  }
  return Number.isFinite(ns) ? ns / 1e6 : cpuTicksMsOf(pid);
}

/** User plus system CPU time from `/proc/<pid>/stat`, in ms (10 ms resolution). */
function cpuTicksMsOf(pid: number): number {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return Number.NaN;
  }
  // The command name (field 2) may hold spaces; the fields after it are plain numbers.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  return ((utime + stime) * 1000) / CLOCK_TICKS_PER_S;
}
/** Pids of the direct children of this process whose command name is `comm`. */
export function childPidsByName(comm: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8");
    } catch {
      continue;
    }
    const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    if (name === comm && ppid === process.pid) pids.push(Number(entry));
  }
  return pids;
}
