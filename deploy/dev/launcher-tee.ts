// The launcher's simulated tier-4 (TEE) nodes: each is a simulator on loopback behind a TD
// proxy (libs/td-proxy) whose TDX quotes are simulated, signed through a test PCK chain made
// for the run (never Intel's), of one fixed demo measurement that the launcher approves.
import { join } from "node:path";
import { encodeJson, openKv } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { ApprovedMeasurementSchema, KV_BUCKETS } from "@zml/contracts";
import type { ApprovedMeasurement } from "@zml/contracts";
import type { LocalNode } from "./launcher-fleet.ts";

/** The simulated TDs' measurement: what `--mrtd` / `--rtmr3` give the TD proxy. */
export const DEMO_MRTD = "de".repeat(48);
export const DEMO_RTMR3 = "d3".repeat(48);
export const TEE_TIER = 4;

/** The test PKI's directory in the run directory; its root is `root.pem` there. */
export function teeDirOf(runDir: string): { dir: string; rootPemFile: string } {
  const dir = join(runDir, "tee");
  return { dir, rootPemFile: join(dir, "root.pem") };
}

/** The TD proxy's arguments for one simulated TEE node in front of `backend`. */
export function tdProxyArgs(options: {
  backend: string;
  listenPort: number;
  teeDir: string;
}): string[] {
  return [
    ...["--backend", options.backend, "--listen", `127.0.0.1:${options.listenPort}`],
    ...["--tier", String(TEE_TIER), "--quote-source", "simulated"],
    ...["--sim-tee-dir", options.teeDir, "--mrtd", DEMO_MRTD, "--rtmr3", DEMO_RTMR3],
    // "td proxy ready" (its URL) is an info line; the launcher does not echo this output.
    ...["--log-level", "info"],
  ];
}

/** One approved measurement per model the simulated TEE nodes serve, at tier 4. */
export function demoMeasurements(tee: LocalNode[]): ApprovedMeasurement[] {
  const models = [...new Set(tee.flatMap(({ node }) => node.models))].sort();
  return models.map((model, i) => ({
    id: `dev-tee-${i + 1}`,
    model,
    tier: TEE_TIER,
    mrtd: DEMO_MRTD,
    rtmr3: DEMO_RTMR3,
    description: "up.sh's simulated TEE nodes (quotes from a test root, never a real TD)",
  }));
}

/**
 * Writes the approvals as the admin API would (the same schema, the same bucket), before the
 * attestation service starts, so its first look at each node already finds its measurement.
 */
export async function approveDemoMeasurements(
  bus: Bus,
  measurements: ApprovedMeasurement[],
): Promise<void> {
  const kv = await openKv(bus, KV_BUCKETS.measurements);
  for (const m of measurements) {
    await kv.put(m.id, encodeJson(m.id, ApprovedMeasurementSchema, m));
  }
}
