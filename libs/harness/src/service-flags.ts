// How the dev launcher and the benchmark run every ZML service: Node flags, the allocator's
// settings and a warm compile cache. The container image sets the same (deploy/docker/Dockerfile;
// deploy/test/compose.test.ts checks they agree). Measurements: docs/performance.md, "Memory".
import { execFile } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

/**
 * V8 heap flags (docs/performance.md, "Memory", for the runs behind them):
 * - `--max-semi-space-size=4` (MiB): V8 sizes the young generation from the machine's memory
 *   (semi-spaces of 16 MiB and more on a large host), and a busy service keeps it committed;
 *   4 MiB keeps 8 MiB of it (8 MiB: 16). The cost: scavenges twice as often (GC's share of
 *   intake's and the dispatcher's CPU went from 13–16 % to 15–17 % under the bench).
 * - `--max-old-space-size=768` (MiB): the old generation grows by a factor V8 takes from this
 *   ceiling (up to 4× the live heap with the default ceiling of a few GiB, 1.5× here), so a
 *   service holds less garbage between full collections (the dispatcher: 214 → 149 MiB RSS
 *   after the bench). A ceiling, not a budget: the live heap is 25–35 MiB after the bench,
 *   a request body is at most 4 MiB (buffers outside the heap; its parsed JSON inside), and the
 *   Kubernetes limit of intake and the dispatcher is 1 GiB for the whole process anyway.
 */
export const SERVICE_NODE_FLAGS: readonly string[] = [
  "--max-semi-space-size=4",
  "--max-old-space-size=768",
];

/**
 * glibc malloc settings (read by the C library when the process starts, so they are
 * environment variables, not Node flags). Without them the memory Node and V8 allocate outside
 * the JS heap (V8's compiler zones peak at 20–35 MiB under load, request buffers, TLS) stays
 * resident after the peak that needed it:
 * - `MALLOC_ARENA_MAX=2`: one arena per thread by default (Node has ~10: V8's platform workers,
 *   libuv's pool), each keeping its own freed memory;
 * - `MALLOC_MMAP_THRESHOLD_=131072` and `MALLOC_TRIM_THRESHOLD_=131072`: glibc's starting
 *   values, fixed. By default glibc raises both (up to 32/64 MiB) after the first large block
 *   is freed, and from then on keeps up to that much free memory instead of returning it.
 *   128 KiB keeps Node's 64 KiB socket reads in the heap (no mmap per read).
 */
export const SERVICE_MALLOC_ENV: Readonly<Record<string, string>> = {
  MALLOC_ARENA_MAX: "2",
  MALLOC_MMAP_THRESHOLD_: "131072",
  MALLOC_TRIM_THRESHOLD_: "131072",
};

/** Where the dev launcher and the bench keep Node's compile cache (ignored by git). */
export function serviceCompileCacheDir(root: string): string {
  return join(root, "node_modules", ".cache", "zml-compile-cache");
}

/**
 * The environment a service process gets on top of its own config: the malloc settings and
 * `NODE_COMPILE_CACHE`. With the cache warm, Node takes each module's type-stripped source
 * from the cache and never loads its TypeScript stripper (a WebAssembly build of swc): that
 * saves ~40 MiB of RSS per process for the process's whole life.
 */
export function serviceRuntimeEnv(compileCacheDir: string): Record<string, string> {
  return { ...SERVICE_MALLOC_ENV, NODE_COMPILE_CACHE: compileCacheDir };
}

/** The exit code of a service whose configuration is invalid (`CONFIG_ERROR_EXIT_CODE`). */
const CONFIG_ERROR_EXIT_CODE = 78;

/**
 * Fills the compile cache for each service's `main.ts` and everything it imports, before the
 * services start: a process that compiles a module the cache lacks loads the stripper and keeps
 * it. Each service is started once with an invalid `LOG_LEVEL`: ES modules are all loaded and
 * compiled before any of them runs, so the start fails at its config (exit 78) with the whole
 * module graph compiled, and Node writes the cache as it exits. Run with the same Node flags as
 * the services: the cache is kept per set of V8 flags. Takes ~1 s per service once warm.
 */
export async function warmCompileCache(
  root: string,
  services: readonly string[],
  compileCacheDir: string,
): Promise<void> {
  mkdirSync(compileCacheDir, { recursive: true });
  await Promise.all(
    services.map(
      (name) =>
        new Promise<void>((resolve, reject) => {
          execFile(
            process.execPath,
            [...SERVICE_NODE_FLAGS, join(root, `services/${name}/src/main.ts`)],
            {
              env: {
                PATH: process.env.PATH ?? "",
                ...serviceRuntimeEnv(compileCacheDir),
                LOG_LEVEL: "invalid-on-purpose-to-only-compile",
              },
              timeout: 60_000,
            },
            (error, _stdout, stderr) => {
              // Exit code (a number), or a spawn error's name, or a signal when it timed out.
              const end = error === null ? "exit 0" : String(error.code ?? error.signal);
              if (error?.code === CONFIG_ERROR_EXIT_CODE) resolve();
              else {
                reject(
                  new Error(
                    `warming the compile cache: ${name} ended with ${end}, expected the config error (${CONFIG_ERROR_EXIT_CODE})\n${stderr}`,
                  ),
                );
              }
            },
          );
        }),
    ),
  );
}
