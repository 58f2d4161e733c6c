// deploy/dev/llama-server.sh end to end with stand-ins for the slow parts: `npm pack` hands
// over a package whose git bundle holds a one-file source tree, and `cmake` prints make's
// progress lines and writes a small script as the binary (or fails). Git, tar, flock and the
// script's own logic are the real ones. What a real build does is shown by the end-to-end
// tests that run the binary it built.
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot } from "@zml/harness";
import { afterAll, describe, expect, it } from "vitest";

const script = join(repoRoot(), "deploy/dev/llama-server.sh");
const scratch = mkdtempSync(join(tmpdir(), "zml-llama-script-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function sh(command: string, cwd: string): void {
  const run = spawnSync("bash", ["-c", command], { cwd, encoding: "utf8" });
  if (run.status !== 0) throw new Error(`${command}: ${run.stderr}`);
}

/** A package tarball like node-llama-cpp's: package/llama/gitRelease.bundle. */
function fakePackage(): string {
  const repo = join(scratch, "repo");
  mkdirSync(repo, { recursive: true });
  writeFileSync(join(repo, "CMakeLists.txt"), "project(fake)\n");
  sh(
    "git init -q && git add . && git -c user.email=t@t -c user.name=t commit -qm src && " +
      "mkdir -p ../pkg/package/llama && git bundle create -q ../pkg/package/llama/gitRelease.bundle HEAD && " +
      "tar -czf ../node-llama-cpp-3.21.1.tgz -C ../pkg package",
    repo,
  );
  return join(scratch, "node-llama-cpp-3.21.1.tgz");
}

/** A PATH whose `npm` and `cmake` are stand-ins; `cmakeFails` makes the build step fail. */
function fakeTools(name: string, tarball: string, cmakeFails: boolean): string {
  const bin = join(scratch, name);
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, "npm"), `#!/bin/bash\n[ "$1" = pack ] && cp ${tarball} .\n`);
  writeFileSync(
    join(bin, "cmake"),
    `#!/bin/bash
if [ "$1" = "--build" ]; then
  for p in 3 14 27 55 100; do echo "[ $p%] Building CXX object step$p.o"; done
  ${cmakeFails ? 'echo "error: compiler crashed" >&2; exit 2' : ""}
  mkdir -p "$2/bin"
  printf '#!/bin/bash\\necho "version: 0.4.0-dev (build 1, commit fake)"\\n' > "$2/bin/llama-server"
  chmod +x "$2/bin/llama-server"
fi
exit 0
`,
  );
  for (const tool of ["npm", "cmake"]) chmodSync(join(bin, tool), 0o755);
  return `${bin}:${process.env["PATH"] ?? ""}`;
}

function run(cache: string, path: string) {
  const r = spawnSync("bash", [script], {
    encoding: "utf8",
    env: { ...process.env, XDG_CACHE_HOME: cache, PATH: path, ZML_BUILD_JOBS: "1" },
    timeout: 60_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe("deploy/dev/llama-server.sh", () => {
  const tarball = fakePackage();

  it("builds once with progress, caches the binary by version, then reuses it", () => {
    const cache = join(scratch, "cache-ok");
    const first = run(cache, fakeTools("ok", tarball, false));
    expect(first.status).toBe(0);
    const binary = join(cache, "zml/llama-server/3.21.1/llama-server");
    expect(first.stdout.trim()).toBe(binary);
    expect(first.stderr).toContain(
      "not built yet on this machine: building it once from node-llama-cpp@3.21.1",
    );
    expect(first.stderr).toMatch(
      /1\/4 fetching .*\n.*2\/4 opening .*\n.*llama\.cpp commit [0-9a-f]{7}\n.*3\/4 configuring/,
    );
    // A line per new tenth of make's progress, with the time so far.
    expect(first.stderr.match(/› llama-server: {4}\d+% after \d+ s/g)).toEqual([
      expect.stringContaining(" 3% after"),
      expect.stringContaining(" 14% after"),
      expect.stringContaining(" 27% after"),
      expect.stringContaining(" 55% after"),
      expect.stringContaining(" 100% after"),
    ]);
    expect(readFileSync(join(cache, "zml/llama-server/3.21.1/BUILD-INFO"), "utf8")).toContain(
      "source: node-llama-cpp@3.21.1 llama/gitRelease.bundle, commit",
    );
    // Nothing of the build is left but the binary and its note.
    expect(existsSync(join(cache, "zml/llama-server/3.21.1/last-failed-build.log"))).toBe(false);

    const again = run(cache, fakeTools("ok", tarball, false));
    expect(again.status).toBe(0);
    expect(again.stdout.trim()).toBe(binary);
    expect(again.stderr).toContain("cached (version: 0.4.0-dev (build 1, commit fake))");
    expect(again.stderr).not.toContain("building");
  });

  it("fails loudly when the compilation fails, keeping the log, and caches nothing", () => {
    const cache = join(scratch, "cache-fail");
    const failed = run(cache, fakeTools("fail", tarball, true));
    expect(failed.status).toBe(1);
    expect(failed.stdout).toBe("");
    const log = join(cache, "zml/llama-server/3.21.1/last-failed-build.log");
    expect(failed.stderr).toContain(`✗ llama-server: compilation failed (status 2); log: ${log}`);
    expect(readFileSync(log, "utf8")).toContain("error: compiler crashed");
    expect(existsSync(join(cache, "zml/llama-server/3.21.1/llama-server"))).toBe(false);
  });
});
