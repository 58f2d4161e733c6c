import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import ts from "typescript";
import { afterAll, describe, expect, it } from "vitest";
import { createClient } from "../src/index.ts";

/** README.md tells users what the client offers; this keeps it true. */
const pkgDir = join(import.meta.dirname, "..");
const readme = readFileSync(join(pkgDir, "README.md"), "utf8");
// Inside the package, so `@zml/client` resolves as it does for a user of the workspace.
const scratch = mkdtempSync(join(pkgDir, "test", ".readme-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe("README.md", () => {
  it("documents every method the client has", () => {
    const zml = createClient({ baseUrl: "http://127.0.0.1:1", apiKey: "k" });
    // Namespaces (`jobs`, `sessions`) are objects of methods: each is documented as `ns.method(`.
    const methods = Object.entries(zml).flatMap(([name, value]) =>
      typeof value === "function"
        ? [name]
        : Object.keys(value as object).map((k) => `${name}.${k}`),
    );
    expect(methods.length).toBeGreaterThan(5);
    for (const method of methods) expect(readme, method).toContain(`\`${method}(`);
    expect(readme).not.toMatch(/not here yet|not yet (available|supported)/i);
  });

  it("has examples that type-check against the client", () => {
    const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) =>
      m[1]!.replace(/^ {2}/gm, ""),
    );
    expect(blocks.length).toBeGreaterThanOrEqual(2);
    // What the examples take as given; a block without a client of its own gets one.
    const given: Array<[name: string, declaration: string]> = [
      ["model", "declare const model: string;"],
      ["messages", 'declare const messages: { role: "user"; content: string }[];'],
      ["baseUrl", "declare const baseUrl: string;"],
      ["apiKey", "declare const apiKey: string;"],
      ["nodeId", "declare const nodeId: string;"],
      ["nodeEndpoint", "declare const nodeEndpoint: string;"],
    ];
    // A block that declares one of these itself keeps its own.
    const givenFor = (code: string) =>
      given
        .filter(([name]) => !new RegExp(`\\b(const|let|var) ${name}\\b`).test(code))
        .map(([, declaration]) => declaration)
        .join("\n");
    const ownClient = [
      'import { createClient } from "@zml/client";',
      'const zml = createClient({ baseUrl: "http://127.0.0.1:8080", apiKey: "k" });',
    ].join("\n");
    const files = blocks.map((code, i) => {
      const file = join(scratch, `example-${i}.ts`);
      const body = code.includes("createClient(") ? code : `${ownClient}\n${code}`;
      writeFileSync(file, `${body}\n${givenFor(body)}\nexport {};\n`);
      return file;
    });
    const config = ts.getParsedCommandLineOfConfigFile(
      join(pkgDir, "tsconfig.json"),
      {},
      {
        ...ts.sys,
        onUnRecoverableConfigFileDiagnostic: () => undefined,
      },
    )!;
    const program = ts.createProgram(files, { ...config.options, noEmit: true });
    const problems = ts
      .getPreEmitDiagnostics(program)
      .filter((d) => d.file !== undefined && files.includes(d.file.fileName))
      .map((d) => `${d.file!.fileName}: ${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`);
    expect(problems).toEqual([]);
  }, 60_000); // type-checking the client and its dependencies takes seconds
});
