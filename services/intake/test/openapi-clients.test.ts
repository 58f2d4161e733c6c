import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createConfig, lintFromString } from "@redocly/openapi-core";
import openapiTS, { astToString } from "openapi-typescript";
import ts from "typescript";
import { afterAll, describe, expect, it } from "vitest";
import { buildOpenApiDocument } from "../src/openapi/document.ts";

/**
 * The published OpenAPI document as client generators and linters see it: TypeScript types
 * generated with openapi-typescript's defaults compile under strict settings and say what
 * the API accepts and returns, and Redocly's recommended rules (the linter of `redocly lint`,
 * run here through its library, offline) find nothing.
 */

const dir = mkdtempSync(join(tmpdir(), "zml-openapi-"));
const doc = buildOpenApiDocument("1.0.0");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Uses of the generated types; each `@ts-expect-error` is a mistake the types must catch. */
const USES = `
import type { components, operations, paths } from "./api.ts";
type Schemas = components["schemas"];

// Requests: defaults are optional on the way in.
export const node: Schemas["NodeSpecInput"] = {
  id: "h100-a",
  endpoint: "http://10.0.0.5:8000",
  framework: "vllm",
  accelerator_family: "H100",
  tier: 1,
  models: ["llama"],
};
export const responses: Schemas["ResponsesRequest"] = { model: "m", input: "hi", stream: true };
export const embeddings: Schemas["EmbeddingRequest"] = { model: "m", input: ["a", "b"] };
// @ts-expect-error a tier is a number
export const badTier: Schemas["ChatCompletionRequest"] = { model: "m", messages: [], tier: "1" };

// Answers: what the server fills in is always there.
export function apisOf(stored: Schemas["NodeSpec"]): string[] {
  return stored.apis;
}
// @ts-expect-error the input side may omit apis
export const omitted: string[] = node.apis;
export type Retrieved =
  paths["/v1/models/{model}"]["get"]["responses"]["200"]["content"]["application/json"];
export const model: Retrieved = { id: "m", object: "model", created: 0, owned_by: "zml" };
export type Create = operations["createResponse"]["requestBody"];
`;

describe("the OpenAPI document for client tools", () => {
  it("gives TypeScript types, generated with openapi-typescript defaults, that compile strict", async () => {
    writeFileSync(join(dir, "api.ts"), astToString(await openapiTS(doc as never)));
    writeFileSync(join(dir, "uses.ts"), USES);
    const program = ts.createProgram([join(dir, "uses.ts")], {
      strict: true,
      noUncheckedIndexedAccess: true,
      exactOptionalPropertyTypes: true,
      noEmit: true,
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      allowImportingTsExtensions: true,
      types: [],
    });
    const problems = ts
      .getPreEmitDiagnostics(program)
      .map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
    expect(problems).toEqual([]);
  }, 60_000);

  it("has an operationId on every operation, unique, and servers", () => {
    const d = doc as { servers: unknown[]; paths: Record<string, Record<string, unknown>> };
    const ids = Object.values(d.paths).flatMap((item) =>
      ["get", "put", "post", "delete"]
        .filter((m) => m in item)
        .map((m) => (item[m] as { operationId?: string }).operationId),
    );
    expect(ids.length).toBeGreaterThan(40);
    expect(ids.every((id) => typeof id === "string" && id.length > 0)).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    expect(d.servers.length).toBeGreaterThan(0);
  });

  it("uses only formats JSON Schema defines", () => {
    const formats = [...JSON.stringify(doc).matchAll(/"format":"([^"]+)"/g)].map((m) => m[1]);
    const standard = ["date-time", "date", "time", "duration", "email", "hostname", "ipv4"];
    standard.push("ipv6", "uri", "uri-reference", "uuid", "regex", "int32", "int64");
    expect(formats.filter((f) => !standard.includes(f!))).toEqual([]);
  });

  it("passes Redocly's recommended ruleset (the rules of `redocly lint`) without a finding", async () => {
    // The project has chosen no licence, so the licence rule is off; every other rule is on.
    const config = await createConfig({
      extends: ["recommended"],
      rules: { "info-license": "off" },
    });
    const problems = await lintFromString({
      source: JSON.stringify(doc),
      absoluteRef: join(dir, "openapi.json"),
      config,
    });
    // Findings that are right about the rule and wrong about this API, each with its reason.
    const exceptions: Record<string, string> = {
      "operation-4xx-response at #/paths/~1v1~1attestation/get/responses":
        "the public allowlist takes no input and no credentials: no client error to answer",
    };
    const found = problems
      .filter((p) => !(`${p.ruleId} at ${p.location[0]?.pointer}` in exceptions))
      .map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location[0]?.pointer}`);
    expect(found).toEqual([]);
  });
});
