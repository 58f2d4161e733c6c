import { readFile } from "node:fs/promises";
import { FleetDocumentSchema } from "@zml/contracts";
import type { FleetDocument } from "@zml/contracts";
import { isNode, LineCounter, parseDocument } from "yaml";
import type { Document } from "yaml";

/** One thing wrong with a fleet document. */
export interface FleetProblem {
  /** The field's dotted path, `(document)` for the whole. */
  path: string;
  message: string;
  /** 1-based line and column in the text where the field (or its nearest parent) is. */
  line?: number;
  column?: number;
}

/** A fleet file that is not valid YAML or does not match the fleet schema. */
export class FleetDocumentError extends Error {
  readonly code = "invalid_fleet_document";
  /** One entry per problem, in document order where lines are known. */
  readonly problems: FleetProblem[];
  constructor(problems: FleetProblem[]) {
    super(`invalid fleet document:\n  ${problems.map((p) => formatProblem(p)).join("\n  ")}`);
    this.name = "FleetDocumentError";
    this.problems = problems;
  }
}

/**
 * A problem as compilers print one: `file:line:column: path: message` (without `file` when
 * none is given, without the position when it is unknown).
 */
export function formatProblem(p: FleetProblem, file?: string): string {
  const at = p.line === undefined ? "" : `${p.line}:${p.column ?? 1}: `;
  const where = file === undefined ? at : at ? `${file}:${at}` : `${file}: `;
  return `${where}${p.path}: ${p.message}`;
}

/** Where a path points in the YAML: its node, or the closest ancestor that exists. */
function positionOf(
  doc: Document,
  lines: LineCounter,
  path: readonly PropertyKey[],
): { line?: number; column?: number } {
  for (let n = path.length; n >= 0; n--) {
    const node: unknown = n === 0 ? doc.contents : doc.getIn(path.slice(0, n), true);
    if (isNode(node) && node.range) {
      const { line, col } = lines.linePos(node.range[0]);
      return { line, column: col };
    }
  }
  return {};
}

/**
 * Parses and validates a fleet document (YAML or JSON text). Every problem carries the line
 * and column of the offending field.
 */
export function parseFleetDocument(text: string): FleetDocument {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines });
  if (doc.errors.length > 0) {
    throw new FleetDocumentError(
      doc.errors.map((e) => {
        const pos = e.linePos?.[0];
        return {
          path: "(document)",
          message: e.message.split("\n")[0]!,
          ...(pos ? { line: pos.line, column: pos.col } : {}),
        };
      }),
    );
  }
  const raw: unknown = doc.toJS();
  const at = (path: readonly PropertyKey[]) => positionOf(doc, lines, path);
  const parsed = FleetDocumentSchema.safeParse(raw);
  if (!parsed.success) {
    throw new FleetDocumentError(
      parsed.error.issues.map((i) => {
        // An unknown key points at itself, not at the object holding it.
        const path =
          i.code === "unrecognized_keys" && i.keys[0] !== undefined
            ? [...i.path, i.keys[0]]
            : i.path;
        return {
          path: path.map(String).join(".") || "(document)",
          message: i.message,
          ...at(path),
        };
      }),
    );
  }
  checkReferences(parsed.data, at);
  // Registration order is the order nodes are listed in; it orders the default policy chain.
  return {
    ...parsed.data,
    nodes: parsed.data.nodes.map((n, i) => ({ ...n, registered_at: i })),
  };
}

export async function loadFleetFile(path: string): Promise<FleetDocument> {
  return parseFleetDocument(await readFile(path, "utf8"));
}

function checkReferences(
  doc: FleetDocument,
  at: (path: readonly PropertyKey[]) => { line?: number; column?: number },
): void {
  const problems: FleetProblem[] = [];
  const policies = new Set(doc.policies.map((p) => p.name));
  const dup = (kind: string, ids: string[]) => {
    const seen = new Set<string>();
    ids.forEach((id, i) => {
      if (seen.has(id)) {
        problems.push({ path: `${kind}.${i}`, message: `duplicate id '${id}'`, ...at([kind, i]) });
      }
      seen.add(id);
    });
  };
  dup(
    "nodes",
    doc.nodes.map((n) => n.id),
  );
  dup(
    "models",
    doc.models.map((m) => m.id),
  );
  dup(
    "policies",
    doc.policies.map((p) => p.name),
  );
  dup(
    "accounts",
    doc.accounts.map((a) => a.id),
  );
  dup(
    "cloud_accounts",
    doc.cloud_accounts.map((a) => a.id),
  );
  const clouds = new Map(doc.cloud_accounts.map((a) => [a.id, a]));
  doc.nodes.forEach((n, i) => {
    if (n.cloud === undefined) return;
    const account = clouds.get(n.cloud.account);
    if (account === undefined) {
      problems.push({
        path: `nodes.${i}.cloud.account`,
        message: `unknown cloud account '${n.cloud.account}'`,
        ...at(["nodes", i, "cloud", "account"]),
      });
    } else if (!account.regions.includes(n.cloud.region)) {
      problems.push({
        path: `nodes.${i}.cloud.region`,
        message: `region '${n.cloud.region}' is not one of cloud account '${account.id}''s regions`,
        ...at(["nodes", i, "cloud", "region"]),
      });
    } else if (account.provider === "gcp" && n.cloud.gpu_type === undefined) {
      problems.push({
        path: `nodes.${i}.cloud.gpu_type`,
        message: "a node on a gcp account needs gpu_type (its GPU's name in the billing catalog)",
        ...at(["nodes", i, "cloud"]),
      });
    }
  });
  doc.models.forEach((m, i) => {
    if (m.default_policy && !policies.has(m.default_policy) && m.default_policy !== "balanced") {
      problems.push({
        path: `models.${i}.default_policy`,
        message: `unknown policy '${m.default_policy}'`,
        ...at(["models", i, "default_policy"]),
      });
    }
  });
  doc.accounts.forEach((a, i) => {
    if (a.default_policy && !policies.has(a.default_policy) && a.default_policy !== "balanced") {
      problems.push({
        path: `accounts.${i}.default_policy`,
        message: `unknown policy '${a.default_policy}'`,
        ...at(["accounts", i, "default_policy"]),
      });
    }
  });
  if (problems.length) throw new FleetDocumentError(problems);
}
