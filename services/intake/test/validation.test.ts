import { ChatCompletionRequestSchema, NodeSpecSchema } from "@zml/contracts";
import { describe, expect, it } from "vitest";
import { validate, zodError } from "../src/request/validation.ts";

const errorOf = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    return e as { code: string; message: string; param: string | null };
  }
  throw new Error("expected a validation error");
};

describe("validation errors", () => {
  it("say 'wrong type' when a field is there with the wrong type", () => {
    const e = errorOf(() =>
      validate(ChatCompletionRequestSchema, {
        model: "m",
        messages: [{ role: "user" }],
        tier: "1",
      }),
    );
    expect(e).toMatchObject({
      code: "invalid_request",
      param: "tier",
      message: "wrong type for 'tier': expected number, got string",
    });
    const nested = errorOf(() =>
      validate(ChatCompletionRequestSchema, { model: "m", messages: [{ role: 7 }] }),
    );
    expect(nested).toMatchObject({
      param: "messages.0.role",
      message: "wrong type for 'messages.0.role': expected string, got number",
    });
    const nulled = errorOf(() =>
      validate(ChatCompletionRequestSchema, { model: null, messages: [] }),
    );
    expect(nulled.message).toBe("wrong type for 'model': expected string, got null");
  });

  it("say 'missing' only when the field is absent", () => {
    const e = errorOf(() =>
      validate(ChatCompletionRequestSchema, { messages: [{ role: "user" }] }),
    );
    expect(e).toMatchObject({ param: "model", message: "missing required field 'model'" });
  });

  it("list every problem of an admin document, each rightly named", () => {
    const doc = { id: "n1", endpoint: "http://x:1", framework: "vllm", tier: "2", models: ["m"] };
    const parsed = NodeSpecSchema.safeParse(doc);
    expect(parsed.success).toBe(false);
    const e = zodError(parsed.error!, doc, true);
    expect(e.message).toContain("missing required field 'accelerator_family'");
    expect(e.message).toContain("wrong type for 'tier': expected number, got string");
  });
});
