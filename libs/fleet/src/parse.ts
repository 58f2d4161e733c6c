import { readFile } from "node:fs/promises";
import { FleetDocumentSchema } from "@zml/contracts";
import type { FleetDocument } from "@zml/contracts";
import { parse as parseYaml } from "yaml";

/** A fleet file that is not valid YAML or does not match the fleet schema. */
export class FleetDocumentError extends Error {
  readonly code = "invalid_fleet_document";
  /** One entry per problem: the field's dotted path and what is wrong with it. */
  readonly problems: Array<{ path: string; message: string }>;
  constructor(problems: Array<{ path: string; message: string }>) {
    super(
      `invalid fleet document:\n  ${problems.map((p) => `${p.path}: ${p.message}`).join("\n  ")}`,
    );
    this.name = "FleetDocumentError";
    this.problems = problems;
  }
}

/** Parses and validates a fleet document (YAML or JSON text). */
export function parseFleetDocument(text: string): FleetDocument {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (err) {
    throw new FleetDocumentError([{ path: "(document)", message: (err as Error).message }]);
  }
  const parsed = FleetDocumentSchema.safeParse(raw);
  if (!parsed.success) {
    throw new FleetDocumentError(
      parsed.error.issues.map((i) => ({
        path: i.path.map(String).join(".") || "(document)",
        message: i.message,
      })),
    );
  }
  checkReferences(parsed.data);
  // Registration order is the order nodes are listed in; it orders the default policy chain.
  return {
    ...parsed.data,
    nodes: parsed.data.nodes.map((n, i) => ({ ...n, registered_at: i })),
  };
}

export async function loadFleetFile(path: string): Promise<FleetDocument> {
  return parseFleetDocument(await readFile(path, "utf8"));
}

function checkReferences(doc: FleetDocument): void {
  const problems: Array<{ path: string; message: string }> = [];
  const policies = new Set(doc.policies.map((p) => p.name));
  const dup = (kind: string, ids: string[]) => {
    const seen = new Set<string>();
    ids.forEach((id, i) => {
      if (seen.has(id)) problems.push({ path: `${kind}.${i}`, message: `duplicate id '${id}'` });
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
  doc.models.forEach((m, i) => {
    if (m.default_policy && !policies.has(m.default_policy) && m.default_policy !== "balanced") {
      problems.push({
        path: `models.${i}.default_policy`,
        message: `unknown policy '${m.default_policy}'`,
      });
    }
  });
  doc.accounts.forEach((a, i) => {
    if (a.default_policy && !policies.has(a.default_policy) && a.default_policy !== "balanced") {
      problems.push({
        path: `accounts.${i}.default_policy`,
        message: `unknown policy '${a.default_policy}'`,
      });
    }
  });
  if (problems.length) throw new FleetDocumentError(problems);
}
