import { accessSync, constants } from "node:fs";
import { join } from "node:path";
import { repoRoot, startProcess } from "@zml/harness";
import type { ManagedProcess } from "@zml/harness";

/**
 * The npm package whose bundled llama.cpp source `deploy/dev/llama-server.sh` builds; the
 * binary is cached by this version. Kept equal to the script's `NODE_LLAMA_CPP_VERSION` (a
 * test reads the script to hold them together).
 */
export const NODE_LLAMA_CPP_VERSION = "3.21.1";

/** The script that builds and caches llama-server, relative to the repository root. */
export const LLAMA_SERVER_SCRIPT = "deploy/dev/llama-server.sh";

/** llama-server has not been built on this machine (or the cached file does not run). */
export class LlamaServerMissingError extends Error {
  readonly code = "llama_server_missing";
  readonly path: string;
  constructor(path: string) {
    super(
      `llama-server is not built on this machine (expected ${path}). ` +
        `Build it once with \`bash ${LLAMA_SERVER_SCRIPT}\` (deploy/dev/test.sh does this before the tests).`,
    );
    this.name = "LlamaServerMissingError";
    this.path = path;
  }
}

/** Where the script caches the binary: `${XDG_CACHE_HOME:-~/.cache}/zml/llama-server/<version>/`. */
export function llamaServerPath(env: Readonly<Record<string, string | undefined>>): string {
  const cache = env["XDG_CACHE_HOME"] || join(env["HOME"] ?? "/root", ".cache");
  return join(cache, "zml", "llama-server", NODE_LLAMA_CPP_VERSION, "llama-server");
}

/**
 * The cached llama-server binary.
 *
 * @throws {LlamaServerMissingError} when it is not there: the caller fails, saying how to
 * build it, rather than skip.
 */
export function findLlamaServer(env: Readonly<Record<string, string | undefined>>): string {
  const path = llamaServerPath(env);
  try {
    accessSync(path, constants.X_OK);
  } catch {
    throw new LlamaServerMissingError(path);
  }
  return path;
}

export interface StartLlamaServerOptions {
  /** Label in logs and errors. */
  name: string;
  binary: string;
  /** A GGUF file (or anything llama-server opens as one). */
  model: string;
  port: number;
  /** The model id the server answers to (`--alias`), as the fleet registers it. */
  alias: string;
  /** Total context (`-c`), shared by the slots. Default 2048. */
  contextSize?: number;
  /** Parallel slots (`-np`). Default 2. */
  slots?: number;
  /** CPU threads (`-t`). Default 1. */
  threads?: number;
  /**
   * Wait for the model to be loaded (`/health` answers 200). Off: return once the server
   * listens and says it is loading, for tests of a server that is still loading.
   */
  waitUntilLoaded?: boolean;
  readyTimeoutMs?: number;
  echo?: boolean;
}

/**
 * Starts a real llama-server on 127.0.0.1 with its metrics and slots endpoints on, as a node
 * of the fleet would run it. Stop it with the handle (`stop()`, `kill()`, `await using`).
 */
export async function startLlamaServer(options: StartLlamaServerOptions): Promise<ManagedProcess> {
  const args = [
    "--model",
    options.model,
    "--alias",
    options.alias,
    "--host",
    "127.0.0.1",
    "--port",
    String(options.port),
    "--ctx-size",
    String(options.contextSize ?? 2048),
    "--parallel",
    String(options.slots ?? 2),
    "--threads",
    String(options.threads ?? 1),
    "--threads-batch",
    String(options.threads ?? 1),
    "--metrics",
    "--slots",
    "--no-webui",
    // The tiny test models need no warm-up, and a server that is still loading must stay so.
    "--no-warmup",
  ];
  const origin = `http://127.0.0.1:${options.port}`;
  return startProcess({
    name: options.name,
    command: options.binary,
    args,
    cwd: repoRoot(),
    // llama-server answers every path 503 until the model is loaded, then /health 200.
    ...(options.waitUntilLoaded === false
      ? { readyLine: /loading model/ }
      : { readyUrl: `${origin}/health` }),
    readyTimeoutMs: options.readyTimeoutMs ?? 30_000,
    echo: options.echo ?? false,
  });
}
