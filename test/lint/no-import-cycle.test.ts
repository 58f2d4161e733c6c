import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Linter } from "eslint";
import tseslint from "typescript-eslint";
import { afterAll, describe, expect, it } from "vitest";
import zmlLint from "./no-import-cycle.ts";

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** Writes the files to a folder of their own, then lints `entry` with only the circle rule. */
function lint(files: Record<string, string>, entry: string): Linter.LintMessage[] {
  const dir = mkdtempSync(join(tmpdir(), "zml-cycle-"));
  dirs.push(dir);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  const config = {
    files: ["**/*.ts"],
    languageOptions: { parser: tseslint.parser },
    plugins: { zml: zmlLint },
    rules: { "zml/no-import-cycle": "error" },
  } as Linter.Config;
  return new Linter({ cwd: dir }).verify(files[entry]!, [config], { filename: join(dir, entry) });
}

describe("zml/no-import-cycle", () => {
  it("fails on a circle closed by a type-only import, naming every file on it", () => {
    const messages = lint(
      {
        "a.ts": 'import { b } from "./b.ts";\nexport const a = b;\n',
        "b.ts": 'import { c } from "./c.ts";\nexport const b = c;\n',
        "c.ts": 'import type { A } from "./types-of-a.ts";\nexport const c: A = 1;\n',
        "types-of-a.ts": 'export type { A } from "./a.ts";\n',
      },
      "a.ts",
    );
    expect(messages).toHaveLength(1);
    expect(messages[0]!.ruleId).toBe("zml/no-import-cycle");
    expect(messages[0]!.message).toContain("a.ts → b.ts → c.ts → types-of-a.ts → a.ts");
  });

  it("passes once the shared type lives in a module both import", () => {
    const messages = lint(
      {
        "a.ts": 'import { b } from "./b.ts";\nexport type A = number;\nexport const a = b;\n',
        "b.ts": 'import { c } from "./c.ts";\nexport const b = c;\n',
        "c.ts": 'import type { A } from "./types-of-a.ts";\nexport const c: A = 1;\n',
        "types-of-a.ts": "export type A = number;\n",
      },
      "a.ts",
    );
    expect(messages).toEqual([]);
  });

  it("counts a dynamic import and an export-from, and leaves other packages out", () => {
    const messages = lint(
      {
        "d.ts": 'import "@zml/contracts";\nexport { e } from "./e.ts";\n',
        "e.ts": 'export const e = () => import("./d.ts");\n',
      },
      "d.ts",
    );
    expect(messages.map((m) => m.message)).toEqual([expect.stringContaining("d.ts → e.ts → d.ts")]);
  });
});
