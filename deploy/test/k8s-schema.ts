// Validates Kubernetes objects offline against the API schema of one Kubernetes release, as
// `kubernetes-models` ships it (pinned to an exact version in deploy/package.json), in two
// passes over the same schema:
// - its JSON-schema validators (generated from the API's OpenAPI document): field types,
//   required fields, formats;
// - its TypeScript declarations of the same types, each object compiled as a literal of its
//   kind's type. The OpenAPI document leaves objects open, so only this pass rejects a field
//   the API does not know (`replica:`, `readinesProbe:`), as `kubectl --validate=strict` does.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata?: { name?: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

export interface SchemaProblem {
  /** `Kind/name` of the object. */
  object: string;
  message: string;
}

export function describeObject(o: K8sObject): string {
  return `${o.kind}/${o.metadata?.name ?? "(no name)"}`;
}

const API_VERSION = /^([a-z0-9.-]+\/)?v\d+[a-z0-9]*$/;
const KIND = /^[A-Z][A-Za-z0-9]*$/;

/** The kubernetes-models module of an object's kind: `apps/v1` + `Deployment` → `…/apps/v1/Deployment`. */
function modelModule(o: K8sObject): string | undefined {
  if (typeof o.apiVersion !== "string" || typeof o.kind !== "string") return undefined;
  if (!API_VERSION.test(o.apiVersion) || !KIND.test(o.kind)) return undefined;
  return `kubernetes-models/${o.apiVersion}/${o.kind}`;
}

type ModelClass = new (data: unknown) => { validate(): void };

async function loadModel(o: K8sObject): Promise<ModelClass | undefined> {
  const specifier = modelModule(o);
  if (specifier === undefined) return undefined;
  try {
    const mod = (await import(specifier)) as Record<string, unknown>;
    return typeof mod[o.kind] === "function" ? (mod[o.kind] as ModelClass) : undefined;
  } catch {
    return undefined;
  }
}

interface AjvError {
  instancePath?: string;
  message?: string;
  params?: Record<string, unknown>;
}

async function jsonSchemaProblems(objects: readonly K8sObject[]): Promise<SchemaProblem[]> {
  const problems: SchemaProblem[] = [];
  for (const o of objects) {
    const Model = await loadModel(o);
    if (Model === undefined) {
      problems.push({
        object: describeObject(o),
        message: `no schema for apiVersion ${String(o.apiVersion)}, kind ${String(o.kind)}`,
      });
      continue;
    }
    try {
      new Model(o).validate();
    } catch (err) {
      const errors = (err as { errors?: AjvError[] }).errors;
      if (!Array.isArray(errors)) throw err;
      for (const e of errors) {
        const detail = e.params ? ` ${JSON.stringify(e.params)}` : "";
        problems.push({
          object: describeObject(o),
          message: `${e.instancePath || "/"} ${e.message ?? "is invalid"}${detail}`,
        });
      }
    }
  }
  return problems;
}

// The checked file lives (virtually) in this directory, so that `kubernetes-models` resolves
// from this workspace as it does for the JSON-schema pass.
const CHECK_FILE = join(dirname(fileURLToPath(import.meta.url)), "__k8s_objects__.ts");

const COMPILER_OPTIONS: ts.CompilerOptions = {
  strict: true,
  noEmit: true,
  skipLibCheck: true,
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  types: [],
};

// Parsed declaration files and the last program, reused by the next check: only the objects'
// file changes between two checks, so the declarations are parsed once per process.
const parsed = new Map<string, ts.SourceFile>();
let previous: ts.Program | undefined;

function unknownFieldProblems(objects: readonly K8sObject[]): SchemaProblem[] {
  const typed = objects.flatMap((o) => {
    const specifier = modelModule(o);
    return specifier === undefined ? [] : [{ o, specifier }];
  });
  if (typed.length === 0) return [];
  // One import and one constant per object; `lineOwner` maps a diagnostic back to its object.
  const lines: string[] = [];
  const lineOwner: Array<K8sObject | undefined> = [];
  typed.forEach(({ o, specifier }, i) => {
    lines.push(`import type { I${o.kind} as T${i} } from ${JSON.stringify(specifier)};`);
    lineOwner.push(o);
  });
  typed.forEach(({ o }, i) => {
    const literal = JSON.stringify(o, null, 1).split("\n");
    literal[0] = `export const o${i}: T${i} = ${literal[0]}`;
    for (const line of literal) {
      lines.push(line);
      lineOwner.push(o);
    }
    lines[lines.length - 1] += ";";
  });
  const source = lines.join("\n");

  const host = ts.createCompilerHost(COMPILER_OPTIONS);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (fileName, languageVersion, ...rest) => {
    if (fileName === CHECK_FILE)
      return ts.createSourceFile(fileName, source, languageVersion, true);
    let file = parsed.get(fileName);
    if (file === undefined) {
      file = getSourceFile(fileName, languageVersion, ...rest);
      if (file) parsed.set(fileName, file);
    }
    return file;
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (fileName) => fileName === CHECK_FILE || fileExists(fileName);
  const readFile = host.readFile.bind(host);
  host.readFile = (fileName) => (fileName === CHECK_FILE ? source : readFile(fileName));

  const program = ts.createProgram([CHECK_FILE], COMPILER_OPTIONS, host, previous);
  previous = program;
  const file = program.getSourceFile(CHECK_FILE)!;
  return ts.getPreEmitDiagnostics(program, file).map((d) => {
    const line =
      d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line : -1;
    const owner = lineOwner[line];
    return {
      object: owner ? describeObject(owner) : "(all)",
      message: ts.flattenDiagnosticMessageText(d.messageText, " "),
    };
  });
}

/** Every problem of these objects against the schema; empty when all are valid. */
export async function validateObjects(objects: readonly K8sObject[]): Promise<SchemaProblem[]> {
  return [...(await jsonSchemaProblems(objects)), ...unknownFieldProblems(objects)];
}
