// Follows the imports a process really executes, from its entry file through relative and
// workspace (`@zml/*`) imports, to list the npm packages it needs at run time.
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { isBuiltin } from "node:module";
import { dirname, join, resolve } from "node:path";

// `import … from "x"`, `export … from "x"`, `import "x"` and `import("x")`. Type-only
// statements are erased by type stripping and are left out.
const STATIC = /^\s*(import|export)\s+(type\s+)?(?:[^'"]*?\s+from\s+)?["']([^"']+)["']/gm;
const DYNAMIC = /\bimport\(\s*["']([^"']+)["']\s*\)/g;

function specifiers(source: string): string[] {
  const out: string[] = [];
  for (const m of source.matchAll(STATIC)) if (m[2] === undefined) out.push(m[3]!);
  for (const m of source.matchAll(DYNAMIC)) out.push(m[1]!);
  return out;
}

function packageName(specifier: string): string {
  const parts = specifier.split("/");
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]!;
}

/** The file a workspace specifier such as `@zml/tdx/testing` resolves to, through `exports`. */
function workspaceFile(root: string, specifier: string): string {
  const name = packageName(specifier);
  const dir = realpathSync(join(root, "node_modules", name));
  const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as {
    exports?: Record<string, string | { default?: string }>;
  };
  const subpath = `.${specifier.slice(name.length)}`;
  const entry = manifest.exports?.[subpath];
  // A conditional export (`{ types, default }`, as the built SDK's) runs its `default`.
  const target = typeof entry === "string" ? entry : entry?.default;
  if (target === undefined) throw new Error(`${name} does not export ${subpath}`);
  return join(dir, target);
}

export interface RuntimeImports {
  /** Source files executed, absolute. */
  files: Set<string>;
  /** npm package name → first file that imports it (relative to the root). */
  packages: Map<string, string>;
}

/** Walks the runtime import graph of `entries` (paths relative to the repository `root`). */
export function runtimeImports(root: string, entries: string[]): RuntimeImports {
  const files = new Set<string>();
  const packages = new Map<string, string>();
  const pending = entries.map((e) => resolve(root, e));
  for (let file = pending.pop(); file !== undefined; file = pending.pop()) {
    if (files.has(file)) continue;
    if (!existsSync(file)) throw new Error(`imported file does not exist: ${file}`);
    files.add(file);
    for (const spec of specifiers(readFileSync(file, "utf8"))) {
      if (spec.startsWith(".")) pending.push(resolve(dirname(file), spec));
      else if (spec.startsWith("@zml/")) pending.push(workspaceFile(root, spec));
      else if (!isBuiltin(spec) && !packages.has(packageName(spec))) {
        packages.set(packageName(spec), file.slice(root.length + 1));
      }
    }
  }
  return { files, packages };
}
