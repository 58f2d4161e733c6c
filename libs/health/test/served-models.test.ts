import { describe, expect, it } from "vitest";
import { refusesUnservedModels, unlistedModels, unservedModels } from "../src/index.ts";

describe("models a node is registered for and its engine does not serve", () => {
  it("are refused only by an engine that checks the name (vLLM)", () => {
    expect(unservedModels("vllm", ["llama-3.1-8b", "mistral-7b"], ["llama-3.1-8b"])).toEqual([
      "mistral-7b",
    ]);
    // TGI and llama.cpp answer any name with their one model.
    expect(unservedModels("tgi", ["llama-3.1-8b"], ["mistral-7b"])).toEqual([]);
    expect(unservedModels("llamacpp", ["llama-3.1-8b"], ["tiny.gguf"])).toEqual([]);
    expect(refusesUnservedModels("vllm")).toBe(true);
    expect(refusesUnservedModels("llamacpp")).toBe(false);
  });

  it("are none while the engine has not said what it serves", () => {
    expect(unservedModels("vllm", ["llama-3.1-8b"], null)).toEqual([]);
    expect(unlistedModels(["llama-3.1-8b"], null)).toEqual([]);
  });

  it("are listed for every engine when the question is only what it lists", () => {
    expect(unlistedModels(["a", "b", "c"], ["b"])).toEqual(["a", "c"]);
  });
});
