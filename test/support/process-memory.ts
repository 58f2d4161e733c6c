// Searches a live process's memory for byte strings, through /proc/<pid>/maps and
// /proc/<pid>/mem (Linux; needs ptrace rights over the process: root, or its parent). Used to
// show that a secret never existed in a process, and that the same search finds it where it did.
import { closeSync, openSync, readdirSync, readFileSync, readSync } from "node:fs";

const CHUNK_BYTES = 4 * 1024 * 1024;

interface Region {
  start: number;
  end: number;
}

function readableRegions(pid: number): Region[] {
  const regions: Region[] = [];
  for (const line of readFileSync(`/proc/${pid}/maps`, "utf8").split("\n")) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) (\S{4})/.exec(line);
    if (!m || m[3]![0] !== "r" || line.endsWith("[vvar]") || line.endsWith("[vsyscall]")) continue;
    regions.push({ start: parseInt(m[1]!, 16), end: parseInt(m[2]!, 16) });
  }
  return regions;
}

/**
 * Which of `needles` occur anywhere in the process's readable memory, as bytes (UTF-8/Latin-1)
 * or as UTF-16LE (V8's two-byte strings). Regions that cannot be read are skipped.
 */
export function findInProcessMemory(pid: number, needles: readonly string[]): Set<string> {
  const patterns = needles.flatMap((n) => [
    { needle: n, bytes: Buffer.from(n, "latin1") },
    { needle: n, bytes: Buffer.from(n, "utf16le") },
  ]);
  const overlap = Math.max(...patterns.map((p) => p.bytes.length)) - 1;
  const found = new Set<string>();
  const fd = openSync(`/proc/${pid}/mem`, "r");
  const buffer = Buffer.alloc(CHUNK_BYTES + overlap);
  try {
    for (const region of readableRegions(pid)) {
      for (let at = region.start; at < region.end; at += CHUNK_BYTES) {
        const length = Math.min(CHUNK_BYTES + overlap, region.end - at);
        let read: number;
        try {
          read = readSync(fd, buffer, 0, length, at);
        } catch {
          break; // an unreadable region (guard pages, device mappings)
        }
        const view = buffer.subarray(0, read);
        for (const p of patterns)
          if (!found.has(p.needle) && view.includes(p.bytes)) found.add(p.needle);
        if (found.size === needles.length) return found;
      }
    }
  } finally {
    closeSync(fd);
  }
  return found;
}

/** Pids of the processes whose command line satisfies `match`. */
export function pidsWhere(match: (argv: string[]) => boolean): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").filter(Boolean);
      if (match(argv)) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}
