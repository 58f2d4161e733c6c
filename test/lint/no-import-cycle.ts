// An ESLint rule that fails on an import circle inside a package, type-only imports included.
// eslint-plugin-import-x's no-cycle skips `import type`, yet a type-only edge is still a
// circle a reader has to untangle, and it is how the last three circles began: a type left
// behind when a module was split. So every relative `import`, `import type`, `export … from`
// and dynamic `import()` counts. Imports of other packages are left out: npm workspaces keep
// packages from depending on each other in a circle.
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";
import type { Rule } from "eslint";
import ts from "typescript";

/** Relative imports of each file read so far, keyed by path, with the mtime they were read at. */
const importsCache = new Map<string, { mtime: number; imports: string[] }>();

function resolveRelative(fromFile: string, specifier: string): string | null {
  const target = resolve(dirname(fromFile), specifier);
  if (existsSync(target) && statSync(target).isFile()) return target;
  const asTs = target.replace(/\.js$/, ".ts");
  return asTs !== target && existsSync(asTs) ? asTs : null;
}

/** The files `source` (the text of `file`) imports by relative path, of any kind. */
function importsIn(file: string, source: string): string[] {
  const { importedFiles } = ts.preProcessFile(source, true, true);
  return importedFiles
    .map((f) => f.fileName)
    .filter((name) => name.startsWith("./") || name.startsWith("../"))
    .map((name) => resolveRelative(file, name))
    .filter((path): path is string => path !== null);
}

/** {@link importsIn} of a file on disk, read again only when it changed. */
function relativeImportsOf(file: string): string[] {
  const mtime = statSync(file).mtimeMs;
  const cached = importsCache.get(file);
  if (cached?.mtime === mtime) return cached.imports;
  const imports = importsIn(file, readFileSync(file, "utf8"));
  importsCache.set(file, { mtime, imports });
  return imports;
}

/**
 * A path of imports from `first` (imported by `file`) back to `file`, or null. Breadth first,
 * so the circle reported is a shortest one.
 */
function circleThrough(file: string, first: string): string[] | null {
  const cameFrom = new Map<string, string | null>([[first, null]]);
  const queue = [first];
  while (queue.length > 0) {
    const at = queue.shift()!;
    for (const next of relativeImportsOf(at)) {
      if (next === file) {
        const path: string[] = [];
        for (let step: string | null = at; step !== null; step = cameFrom.get(step) ?? null) {
          path.unshift(step);
        }
        return path;
      }
      if (!cameFrom.has(next)) {
        cameFrom.set(next, at);
        queue.push(next);
      }
    }
  }
  return null;
}

const rule: Rule.RuleModule = {
  meta: {
    type: "problem",
    docs: { description: "Forbid import circles, type-only imports included." },
    schema: [],
    messages: { circle: "Import circle: {{circle}}. Move the shared part to a module both use." },
  },
  create(context) {
    const file = context.physicalFilename;
    if (!file.endsWith(".ts") && !file.endsWith(".js")) return {};
    const root = context.cwd;
    const shown = (path: string) => (path.startsWith(root) ? path.slice(root.length + 1) : path);
    return {
      Program(program) {
        const reported = new Set<string>();
        for (const first of importsIn(file, context.sourceCode.text)) {
          if (reported.has(first)) continue;
          const path = circleThrough(file, first);
          if (path === null) continue;
          reported.add(first);
          const circle = [file, ...path, file].map(shown).join(" → ");
          context.report({ node: program, messageId: "circle", data: { circle } });
        }
      },
    };
  },
};

/** The workspace's own lint rules, as an ESLint plugin (`zml/…` in eslint.config.js). */
export default { rules: { "no-import-cycle": rule } };
