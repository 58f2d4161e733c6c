import { parsePrometheusText } from "@zml/health";
import { describe, expect, it } from "vitest";
import { startSimNode } from "../src/index.ts";
import type { SimNode } from "../src/index.ts";
import { CHAT_BODY, metricValue, post, waitFor } from "./helpers.ts";

const scrape = async (node: SimNode): Promise<string> => {
  const res = await fetch(`${node.url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  return res.text();
};

/** Every sample must belong to a family announced by `# TYPE`, as exposition requires. */
function expectWellFormed(text: string): void {
  const { families } = parsePrometheusText(text);
  for (const family of families.values()) {
    expect(family.type, family.name).toMatch(/^(counter|gauge|histogram)$/);
    for (const sample of family.samples)
      expect(Number.isNaN(sample.value), sample.name).toBe(false);
  }
}

describe("metrics", () => {
  it("exposes vLLM's series with a model_name label and counts tokens", async () => {
    await using node = await startSimNode({
      nodeId: "v",
      flavour: "vllm",
      models: ["llama-3-8b", "alias"],
      completionTokens: 5,
      instanceId: "inst-1",
    });
    await (await post(`${node.url}/v1/chat/completions`, CHAT_BODY)).text();
    await (await post(`${node.url}/v1/chat/completions`, { ...CHAT_BODY, stream: true })).text();
    const text = await scrape(node);
    expectWellFormed(text);
    const label = '{model_name="llama-3-8b"}';
    for (const [name, type] of [
      ["vllm:num_requests_running", "gauge"],
      ["vllm:num_requests_waiting", "gauge"],
      ["vllm:gpu_cache_usage_perc", "gauge"],
      ["vllm:prompt_tokens_total", "counter"],
      ["vllm:generation_tokens_total", "counter"],
    ] as const) {
      expect(text).toContain(`# HELP ${name} `);
      expect(text).toContain(`# TYPE ${name} ${type}\n`);
      expect(metricValue(text, `${name}${label}`)).toBeDefined();
    }
    expect(metricValue(text, `vllm:generation_tokens_total${label}`)).toBe(10);
    expect(metricValue(text, `vllm:prompt_tokens_total${label}`)).toBeGreaterThan(0);
    expect(metricValue(text, `vllm:num_requests_running${label}`)).toBe(0);
    expect(
      metricValue(
        text,
        'vllm:request_success_total{model_name="llama-3-8b",finished_reason="stop"}',
      ),
    ).toBe(2);
    expect(metricValue(text, `vllm:time_to_first_token_seconds_count${label}`)).toBe(2);
    // One observation per gap between two tokens: 4 in each 5-token answer.
    expect(metricValue(text, `vllm:time_per_output_token_seconds_count${label}`)).toBe(8);
    expect(metricValue(text, `vllm:time_per_output_token_seconds_sum${label}`)).toBeGreaterThan(0);
    expect(metricValue(text, 'zml_sim_instance_info{instance_id="inst-1"}')).toBe(1);
  });

  it("exposes TGI's series", async () => {
    await using node = await startSimNode({
      nodeId: "t",
      flavour: "tgi",
      models: ["llama-3-8b"],
      completionTokens: 7,
    });
    await (await post(`${node.url}/v1/completions`, { model: "llama-3-8b", prompt: "hi" })).text();
    const text = await scrape(node);
    expectWellFormed(text);
    for (const [name, type] of [
      ["tgi_queue_size", "gauge"],
      ["tgi_batch_current_size", "gauge"],
      ["tgi_batch_current_max_tokens", "gauge"],
      ["tgi_request_count", "counter"],
      ["tgi_request_success", "counter"],
      ["tgi_request_generated_tokens", "histogram"],
      ["tgi_request_input_length", "histogram"],
      ["tgi_request_duration", "histogram"],
      ["tgi_request_queue_duration", "histogram"],
      ["tgi_request_mean_time_per_token_duration", "histogram"],
    ] as const) {
      expect(text).toContain(`# TYPE ${name} ${type}\n`);
    }
    expect(metricValue(text, "tgi_request_count")).toBe(1);
    expect(metricValue(text, "tgi_request_success")).toBe(1);
    expect(metricValue(text, "tgi_request_generated_tokens_sum")).toBe(7);
    expect(metricValue(text, 'tgi_request_generated_tokens_bucket{le="+Inf"}')).toBe(1);
    expect(metricValue(text, "tgi_queue_size")).toBe(0);
    expect(text).toMatch(/^zml_sim_instance_info\{instance_id="[0-9a-f-]{36}"\} 1$/m);
  });

  for (const flavour of ["vllm", "tgi"] as const) {
    it(`reports running and waiting requests above maxConcurrency (${flavour})`, async () => {
      await using node = await startSimNode({
        nodeId: "c",
        flavour,
        models: ["llama-3-8b"],
        maxConcurrency: 2,
        ttftMs: 60_000,
      });
      const abort = new AbortController();
      const pending = Array.from({ length: 5 }, () =>
        post(`${node.url}/v1/chat/completions`, CHAT_BODY, { signal: abort.signal }).catch(
          () => "aborted",
        ),
      );
      const [runningSeries, waitingSeries] =
        flavour === "vllm"
          ? [
              'vllm:num_requests_running{model_name="llama-3-8b"}',
              'vllm:num_requests_waiting{model_name="llama-3-8b"}',
            ]
          : ["tgi_batch_current_size", "tgi_queue_size"];
      const text = await waitFor(
        () => scrape(node),
        (t) => metricValue(t, waitingSeries) === 3,
        "3 waiting requests",
      );
      expect(metricValue(text, runningSeries)).toBe(2);
      expect(node.stats()).toMatchObject({ running: 2, waiting: 3, in_flight: 5 });
      if (flavour === "vllm") {
        expect(metricValue(text, 'vllm:gpu_cache_usage_perc{model_name="llama-3-8b"}')).toBe(1);
      }

      // Raising the limit admits the waiters at once.
      node.configure({ maxConcurrency: 4 });
      expect(node.stats()).toMatchObject({ running: 4, waiting: 1 });

      abort.abort();
      expect(await Promise.all(pending)).toEqual(Array(5).fill("aborted"));
      await waitFor(
        () => node.stats(),
        (s) => s.in_flight === 0 && s.running === 0 && s.waiting === 0,
        "the node to notice the aborted clients",
      );
      const after = await scrape(node);
      expect(metricValue(after, runningSeries)).toBe(0);
      expect(metricValue(after, waitingSeries)).toBe(0);
    });
  }
});
