/**
 * Engines that refuse a request for a model they do not serve: vLLM answers 404 ("The model
 * `x` does not exist"). TGI and llama.cpp's `llama-server` serve their one model whatever name
 * a request gives, so a registration under another name still gets answers (from the model
 * they do serve); SGLang is not known here to check the name either.
 */
const REFUSES_UNSERVED_MODELS: ReadonlySet<string> = new Set(["vllm"]);

/**
 * The registered models of a node that its engine would refuse, from what the engine says it
 * serves: none when the engine did not say (`served` null) or does not refuse unknown names.
 */
export function unservedModels(
  framework: string,
  registered: readonly string[],
  served: readonly string[] | null,
): string[] {
  if (served === null || !REFUSES_UNSERVED_MODELS.has(framework)) return [];
  const known = new Set(served);
  return registered.filter((model) => !known.has(model));
}

/** Registered models the engine does not list, whether or not it would refuse them. */
export function unlistedModels(
  registered: readonly string[],
  served: readonly string[] | null,
): string[] {
  if (served === null) return [];
  const known = new Set(served);
  return registered.filter((model) => !known.has(model));
}

/** Whether the engine refuses requests for models it does not serve (see `unservedModels`). */
export function refusesUnservedModels(framework: string): boolean {
  return REFUSES_UNSERVED_MODELS.has(framework);
}
