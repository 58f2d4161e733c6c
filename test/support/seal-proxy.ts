import { join } from "node:path";
import { repoRoot, startProcess } from "@zml/harness";
import type { ManagedProcess } from "@zml/harness";

const READY = /end to end at (http:\/\/\S+)/;

/**
 * `zml seal-proxy` as a user runs it (the CLI from source), on a free loopback port, trusting
 * the test root `rootPemFile` and the measurement `mrtd`; resolves once it serves, with the
 * `/v1` base URL its ready line names.
 */
export async function startSealProxy(options: {
  gateway: string;
  apiKey: string;
  model: string;
  rootPemFile: string;
  mrtd: string;
}): Promise<{ process: ManagedProcess; baseUrl: string }> {
  const proc = await startProcess({
    name: "seal-proxy",
    command: process.execPath,
    args: [
      join(repoRoot(), "libs/cli/src/main.ts"),
      "seal-proxy",
      ...["--gateway", options.gateway, "--api-key", options.apiKey, "--model", options.model],
      ...["--listen", "127.0.0.1:0", "--trust-test-root", options.rootPemFile],
      ...["--mrtd", options.mrtd],
    ],
    readyLine: READY,
  });
  const [line] = await proc.waitForOutput(READY);
  return { process: proc, baseUrl: READY.exec(line)![1]! };
}
