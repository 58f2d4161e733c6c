// Bytes each service allocates while the gateway side of a round runs, read through
// `alloc-probe.ts` (see `run.ts --alloc`). Unlike CPU time, what a request allocates does not
// depend on how busy the shared machine is, so it compares two builds run by run.
import { existsSync, readFileSync } from "node:fs";
import { pollUntil } from "@zml/harness";

export interface AllocationMeter {
  /** Starts counting from now in every watched service. */
  start(): Promise<void>;
  /** Bytes each watched service allocated since `start`. */
  stop(): Promise<Record<string, number>>;
}

/** The file a service's probe writes to, one JSON line per signal. */
export interface ProbedService {
  pid: number;
  file: string;
}

export function allocationMeter(services: ReadonlyMap<string, ProbedService>): AllocationMeter {
  const lines = (file: string) =>
    existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean) : [];
  // Signals every probe and waits for each one's next line: the bytes since its last signal.
  const read = async (): Promise<Record<string, number>> => {
    const seen = new Map([...services].map(([name, s]) => [name, lines(s.file).length]));
    for (const s of services.values()) process.kill(s.pid, "SIGUSR2");
    await pollUntil(
      () => [...services].every(([name, s]) => lines(s.file).length > seen.get(name)!),
      { timeoutMs: 10_000 },
    );
    const bytes: Record<string, number> = {};
    for (const [name, s] of services) {
      bytes[name] = (JSON.parse(lines(s.file).at(-1)!) as { bytes: number }).bytes;
    }
    return bytes;
  };
  return {
    start: async () => void (await read()),
    stop: read,
  };
}
