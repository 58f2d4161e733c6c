/* eslint-disable @typescript-eslint/no-explicit-any -- JSON Schema documents, read loosely */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
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
