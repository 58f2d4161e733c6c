import { describe, expect, it } from "vitest";
import { ERROR_CODES, ZmlError, openAiErrorType, toOpenAiError } from "../src/index.ts";

describe("error codes", () => {
  it("carry their HTTP status, retryability and offending field", () => {
    const e = new ZmlError("invalid_request", "missing required field 'model'", { param: "model" });
    expect(e.status).toBe(400);
    expect(e.retryable).toBe(false);
    expect(e.toBody()).toEqual({ code: "invalid_request", message: e.message, param: "model" });
    expect(new ZmlError("saturated", "busy", { retryAfterS: 2 }).toBody().retry_after_s).toBe(2);
  });

  it("round-trip through the bus body", () => {
    const e = ZmlError.fromBody(
      new ZmlError("no_node_available", "none", { param: "model", retryAfterS: 5 }).toBody(),
    );
    expect([e.code, e.status, e.param, e.retryAfterS]).toEqual([
      "no_node_available",
      503,
      "model",
      5,
    ]);
  });

  it("map to the OpenAI error envelope the SDKs understand", () => {
    expect(
      toOpenAiError(new ZmlError("unauthorized", "bad key", { param: "authorization" }).toBody()),
    ).toEqual({
      error: {
        message: "bad key",
        type: "authentication_error",
        param: "authorization",
        code: "unauthorized",
      },
    });
    expect(openAiErrorType(503)).toBe("api_error");
    expect(openAiErrorType(404)).toBe("not_found_error");
  });

  it("only use 4xx statuses for client mistakes and never retry them", () => {
    for (const [code, { status, retryable }] of Object.entries(ERROR_CODES)) {
      if (status < 500) expect(retryable, code).toBe(false);
    }
  });
});
