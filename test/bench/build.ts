import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";

/**
 * What build a run measured: the commit, and for a tree with changes, a hash of them, so
 * that two runs count as the same build only when they measured the same code. `unknown`
 * outside a git checkout.
 */
export function buildIdOf(root: string): string {
  const git = (...args: string[]) =>
    execFileSync("git", args, { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
  try {
    const commit = git("rev-parse", "HEAD").trim();
    const diff = git("diff", "HEAD");
    return diff === ""
      ? commit
      : `${commit}+${createHash("sha256").update(diff).digest("hex").slice(0, 12)}`;
  } catch {
    return "unknown";
  }
}
