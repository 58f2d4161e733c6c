// What judging a node's JSON answer costs per answer (services/dispatcher/src/node/answer-check.ts):
// the framing check alone, and the framing plus the parse that answers of at most
// PARSED_JSON_MAX_BYTES get, for chat completions of a few sizes. Run with
// `npm run bench -w @zml/dispatcher`; compare with the dispatcher's CPU per request in
// docs/performance.md.
import { hasJsonFraming, isJsonBody, PARSED_JSON_MAX_BYTES } from "../src/node/answer-check.ts";

/** A vLLM chat completion of `words` words, as bytes. */
function completion(words: number): Buffer {
  const content = Array.from({ length: words }, (_, i) => `word${i}`).join(" ");
  return Buffer.from(
    JSON.stringify({
      id: "chatcmpl-0123456789abcdef",
      object: "chat.completion",
      created: 1_733_000_000,
      model: "llama-3.1-8b-instruct",
      choices: [
        {
          index: 0,
          message: { role: "assistant", content, tool_calls: [] },
          logprobs: null,
          finish_reason: "stop",
          stop_reason: null,
        },
      ],
      usage: { prompt_tokens: 12, total_tokens: 12 + words, completion_tokens: words },
      prompt_logprobs: null,
    }),
  );
}

/** Nanoseconds per call, the median of 5 rounds of about 40 MB of answers each. */
function nsPerCall(check: (body: Buffer) => boolean, body: Buffer): number {
  const calls = Math.max(200, Math.floor(40e6 / body.length));
  const rounds: number[] = [];
  for (let round = 0; round < 6; round++) {
    let ok = 0;
    const started = process.hrtime.bigint();
    for (let i = 0; i < calls; i++) if (check(body)) ok++;
    const ns = Number(process.hrtime.bigint() - started) / calls;
    if (ok !== calls) throw new Error("a valid answer was judged invalid");
    if (round > 0) rounds.push(ns); // the first round warms the JIT up
  }
  return rounds.sort((a, b) => a - b)[2]!;
}

console.log(`parsed up to ${PARSED_JSON_MAX_BYTES} bytes; framing only above`);
console.log("answer bytes | framing ns | isJsonBody µs (what the dispatcher runs)");
for (const words of [16, 128, 1_000, 1_800, 10_000, 120_000]) {
  const body = completion(words);
  const framing = nsPerCall(hasJsonFraming, body);
  const judged = nsPerCall(isJsonBody, body);
  console.log(
    `${String(body.length).padStart(12)} | ${framing.toFixed(0).padStart(10)} | ${(judged / 1000).toFixed(2)}`,
  );
}
