// The fleet the launcher applies: the user's file (ZML_FLEET_FILE) or the demo fleet, with the
// demo API key's hash added, and its nodes split into those the launcher simulates and the rest.
import { createHash } from "node:crypto";
import { relative } from "node:path";
import { FleetDocumentError, parseFleetDocument } from "@zml/fleet";
import type { FleetDocument, NodeSpec } from "@zml/contracts";
import { configProblem, readConfigFile } from "@zml/runtime";

export const DEMO_ACCOUNT = "demo";

/** Reads and validates the fleet file; every problem becomes a `ConfigError` on ZML_FLEET_FILE. */
export function loadLauncherFleet(path: string): { fleet: FleetDocument; fileLabel: string } {
  const fileLabel = relative(process.cwd(), path) || path;
  const what = "fleet YAML file (see deploy/config/dev-fleet.yaml)";
  const text = readConfigFile("ZML_FLEET_FILE", path, what).toString("utf8");
  try {
    return { fleet: parseFleetDocument(text), fileLabel };
  } catch (error) {
    if (!(error instanceof FleetDocumentError)) throw error;
    const problems = error.problems.map((p) => `${p.path}: ${p.message}`).join("; ");
    throw configProblem(
      "ZML_FLEET_FILE",
      `${fileLabel} is not a valid fleet document: ${problems}`,
      "fix the fields named (deploy/config/dev-fleet.yaml is a complete example)",
    );
  }
}

/**
 * The fleet with the demo key's SHA-256 on account "demo"; a fleet without that account gets
 * one (tiers 1, 2 and 4, like the demo fleet's), so the key the launcher prints always works,
 * for the seal proxy too.
 */
export function withDemoAccount(
  fleet: FleetDocument,
  apiKey: string,
): { fleet: FleetDocument; addedAccount: boolean } {
  const keyHash = createHash("sha256").update(apiKey).digest("hex");
  const existing = fleet.accounts.find((a) => a.id === DEMO_ACCOUNT);
  const accounts = existing
    ? fleet.accounts.map((a) => (a === existing ? { ...a, api_key_sha256: [keyHash] } : a))
    : [
        ...fleet.accounts,
        { id: DEMO_ACCOUNT, api_key_sha256: [keyHash], allowed_tiers: [1, 2, 4] },
      ];
  return { fleet: { ...fleet, accounts }, addedAccount: existing === undefined };
}

export interface LocalNode {
  /** The fleet's own node object: its endpoint is updated once the simulator listens. */
  node: NodeSpec;
  /** The port the fleet file gives it. */
  port: number;
  /**
   * A tier-4 node: a simulator on a free loopback port behind a TD proxy (simulated TDX
   * quotes) that listens on `port`; the endpoint applied is the TD proxy's https URL.
   */
  tee: boolean;
}

/**
 * Nodes on a plain-http loopback endpoint are simulated by the launcher, and so are tier-4
 * nodes on a loopback endpoint (http or https), as TEE nodes behind a TD proxy; any other
 * endpoint (remote, or https below tier 4) is the user's own node and must already be serving.
 */
export function splitLocalNodes(fleet: FleetDocument): { local: LocalNode[]; remote: NodeSpec[] } {
  const local: LocalNode[] = [];
  const remote: NodeSpec[] = [];
  for (const node of fleet.nodes) {
    const url = new URL(node.endpoint);
    const loopback = ["127.0.0.1", "localhost", "[::1]"].includes(url.hostname);
    const tee = node.tier === 4 && loopback && ["http:", "https:"].includes(url.protocol);
    const port = Number(url.port || (url.protocol === "https:" ? 443 : 80));
    if (tee || (url.protocol === "http:" && loopback)) local.push({ node, port, tee });
    else remote.push(node);
  }
  return { local, remote };
}
