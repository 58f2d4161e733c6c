import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";

let cached: string | undefined;

function isRepoRoot(dir: string): boolean {
  const manifest = join(dir, "package.json");
  if (!existsSync(manifest)) return false;
  try {
    return (JSON.parse(readFileSync(manifest, "utf8")) as { name?: unknown }).name === "zml";
  } catch {
    return false;
  }
}

/**
 * Absolute path of the monorepo root: the nearest directory above this file whose
 * `package.json` is named `zml`. Independent of the caller's working directory.
 */
export function repoRoot(): string {
  if (cached !== undefined) return cached;
  let dir = import.meta.dirname;
  for (;;) {
    if (isRepoRoot(dir)) {
      cached = dir;
      return dir;
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`no package.json named "zml" above ${import.meta.dirname}`);
    dir = parent;
  }
}
