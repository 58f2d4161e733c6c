/* eslint-disable @typescript-eslint/no-explicit-any -- JSON Schema documents, read loosely */
import { ERROR_CODES } from "@zml/contracts";
import type { ErrorCode } from "@zml/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ERROR_CODES_EXTENSION } from "../src/openapi/document.ts";
import { errorStatusesOf, OPERATION_ERRORS } from "../src/openapi/operation-errors.ts";
import { startIntake } from "./helpers.ts";
import type { Harness } from "./helpers.ts";

let h: Harness;
beforeAll(async () => {
  h = await startIntake();
});
afterAll(async () => {
  await h?.close();
});

type Doc = {
  openapi: string;
  paths: Record<string, Record<string, unknown>>;
  components: {
    schemas: Record<string, { required?: string[]; properties?: Record<string, any> }>;
  };
};

describe("/openapi.json", () => {
  it("is served without credentials and describes every route that exists", async () => {
    const res = await fetch(`${h.url}/openapi.json`);
    expect(res.status).toBe(200);
    const doc = (await res.json()) as Doc;
    expect(doc.openapi).toBe("3.1.0");
    const methods = ["get", "put", "post", "delete"];
    let operations = 0;
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const method of Object.keys(item).filter((m) => methods.includes(m))) {
        const url = path
          // Model ids may hold a `/`: that route is a wildcard.
          .replace("/v1/models/{model}", "/v1/models/*")
          .replaceAll(/\{(\w+)\}/g, ":$1")
          .replace(/^\/admin\/v1\/[\w-]+\/:key$/, "/admin/v1/:kind/:key")
          .replace(/^\/admin\/v1\/(?!accounts\/:key\/keys)[\w-]+$/, "/admin/v1/:kind");
        expect(h.app.hasRoute({ method: method.toUpperCase(), url }), `${method} ${path}`).toBe(
          true,
        );
        operations++;
      }
    }
    expect(operations).toBeGreaterThan(30);
    for (const path of [
      "/v1/chat/completions",
      "/v1/completions",
      "/v1/infer",
      "/v1/models",
      "/v1/models/{model}",
      "/v1/responses",
      "/v1/embeddings",
      "/admin/v1/revocations/{key}",
      "/admin/v1/costs",
    ]) {
      expect(doc.paths[path], path).toBeDefined();
    }
  });

  it("takes its schemas from the validating zod schemas", async () => {
    const doc = (await (await fetch(`${h.url}/openapi.json`)).json()) as Doc;
    const chat = doc.components.schemas.ChatCompletionRequest!;
    expect(chat.required).toEqual(expect.arrayContaining(["model", "messages"]));
    expect(chat.properties!.tier).toMatchObject({ minimum: 1, maximum: 4 });
    expect(chat.properties!.accelerator_hint.pattern).toBeDefined();
    const policy = doc.components.schemas.PolicySpec!;
    expect(policy.properties!.cost_priority.enum).toEqual(["cost", "balanced", "latency"]);
    const infer = doc.components.schemas.InferRequest!;
    expect(infer.properties!.fallback_models.type).toBe("array");
    expect(doc.components.schemas.Error!.properties!.error.properties.code.enum).toContain(
      "tier_not_allowed",
    );
    for (const name of [
      "NodeSpec",
      "ModelSpec",
      "AccountSpec",
      "CostEntry",
      "QualityScore",
      "ApprovedMeasurement",
      "Revocation",
    ]) {
      expect(doc.components.schemas[name], name).toBeDefined();
    }
  });
});

interface Operation {
  operationId: string;
  security: unknown[];
  requestBody?: unknown;
  responses: Record<string, { content?: Record<string, { schema?: { $ref?: string } }> }>;
}

/** Every operation of the served document, with its method and path. */
async function operations(): Promise<Array<{ key: string; path: string; op: Operation }>> {
  const doc = (await (await fetch(`${h.url}/openapi.json`)).json()) as Doc;
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    ["get", "put", "post", "delete"]
      .filter((m) => m in item)
      .map((m) => ({ key: `${m.toUpperCase()} ${path}`, path, op: item[m] as Operation })),
  );
}

describe("/openapi.json error answers", () => {
  it("references the error envelope from every error response, naming codes of that status", async () => {
    const doc = (await (await fetch(`${h.url}/openapi.json`)).json()) as Doc;
    const envelopeCodes = doc.components.schemas.Error!.properties!.error.properties.code.enum;
    let checked = 0;
    for (const { key, op } of await operations()) {
      for (const [status, response] of Object.entries(op.responses)) {
        if (!/^[45]\d\d$/.test(status)) continue;
        expect(response.content?.["application/json"]?.schema?.$ref, `${key} ${status}`).toBe(
          "#/components/schemas/Error",
        );
        const codes = (response as Record<string, unknown>)[ERROR_CODES_EXTENSION] as ErrorCode[];
        expect(codes.length, `${key} ${status}`).toBeGreaterThan(0);
        for (const code of codes) {
          expect(ERROR_CODES[code].status, `${key} ${status} ${code}`).toBe(Number(status));
          expect(envelopeCodes).toContain(code);
        }
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(200);
  });

  it("documents exactly the statuses of operation-errors.ts, for every operation and no other", async () => {
    const ops = await operations();
    expect(ops.map((o) => o.op.operationId).sort()).toEqual(Object.keys(OPERATION_ERRORS).sort());
    for (const { key, op } of ops) {
      const errors = OPERATION_ERRORS[op.operationId]!;
      const documented = Object.keys(op.responses).filter((s) => /^[45]/.test(s));
      const expected = errorStatusesOf(errors).map(([status]) => String(status));
      if (errors.relaysNodeClientErrors) expected.push("4XX");
      expect(documented.sort(), key).toEqual(expected.sort());
    }
  });

  it("agrees with what each operation visibly takes: a credential, a body, a path parameter", async () => {
    for (const { key, path, op } of await operations()) {
      const statuses = Object.keys(op.responses);
      // Public operations answer no 401; every credentialed one may.
      expect(statuses.includes("401"), key).toBe(op.security.length > 0);
      // Every operation is under /v1/ or /admin/: the authentication throttle applies.
      expect(statuses, key).toContain("429");
      expect(statuses, key).toContain("500");
      if (op.requestBody !== undefined || key.startsWith("DELETE")) {
        for (const s of ["408", "413", "415"]) expect(statuses, `${key} ${s}`).toContain(s);
      }
      if (path.includes("{")) expect(statuses, key).toContain("400");
    }
  });
});
