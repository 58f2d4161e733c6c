import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MetricsReadError, readMetrics } from "../src/index.ts";
import { fixture } from "./helpers.ts";

function readError(run: () => unknown): MetricsReadError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(MetricsReadError);
    return error as MetricsReadError;
  }
  throw new Error("expected a MetricsReadError");
}

describe("readMetrics: vLLM (real captures)", () => {
  const v0 = fixture("vllm-v0-qwen3-0.6b.prom");
  const v1 = fixture("vllm-v1-llama-kserve.prom");

  it("reads a full vLLM v0-engine exposition (gpu_cache_usage_perc era)", () => {
    expect(readMetrics("vllm", v0)).toEqual({
      running: 0,
      waiting: 0,
      queueDepth: 0,
      kvCacheUsage: 0,
      freeMemoryGib: null,
      promptTokensTotal: 14,
      generationTokensTotal: 107,
      // One request of 107 tokens: 106 gaps between them.
      tokenLatency: { seconds: 2.254702091217041, count: 106 },
      instanceId: null,
      // v0 exported no prefix-cache counters (prefix caching was off: `enable_prefix_caching`).
      prefixCache: null,
      // 14 prompt tokens in the PREFILL phase histogram's 0.273 s.
      prefill: { tokens: 14, seconds: 0.2732269763946533 },
      // cache_config_info: num_gpu_blocks="2340" × block_size="16".
      kvCacheCapacityTokens: 37_440,
      servedModels: null,
      slots: null,
    });
  });

  it("reads seconds per output token summed over engines, the newest series name first", () => {
    const series = (name: string, engine: string, sum: number, count: number) =>
      `# TYPE ${name} histogram\n` +
      `${name}_bucket{engine="${engine}",le="+Inf",model_name="m"} ${count}.0\n` +
      `${name}_count{engine="${engine}",model_name="m"} ${count}.0\n` +
      `${name}_sum{engine="${engine}",model_name="m"} ${sum}\n`;
    const itl = "vllm:inter_token_latency_seconds";
    const perRequest = "vllm:request_time_per_output_token_seconds";
    const twoEngines = v1 + series(itl, "0", 1.5, 100) + series(itl, "1", 0.5, 60);
    expect(readMetrics("vllm", twoEngines).tokenLatency).toEqual({ seconds: 2, count: 160 });
    const withPerRequest = twoEngines + series(perRequest, "0", 0.25, 10);
    expect(readMetrics("vllm", withPerRequest).tokenLatency).toEqual({ seconds: 0.25, count: 10 });
    // Not reported at all: unknown, not zero.
    expect(readMetrics("vllm", v1).tokenLatency).toBeNull();
  });

  it("reads a vLLM V1 exposition with engine labels and _created series", () => {
    expect(readMetrics("vllm", v1)).toMatchObject({
      running: 0,
      waiting: 0,
      kvCacheUsage: 0,
      promptTokensTotal: 0,
      generationTokensTotal: 0,
    });
  });

  it("takes KV-cache usage from the renamed kv_cache_usage_perc gauge", () => {
    const text = v1.replace(
      'vllm:kv_cache_usage_perc{engine="0",model_name="llama-vllm-single"} 0.0',
      'vllm:kv_cache_usage_perc{engine="0",model_name="llama-vllm-single"} 0.37',
    );
    expect(readMetrics("vllm", text).kvCacheUsage).toBe(0.37);
  });

  it("takes KV-cache usage from the older gpu_cache_usage_perc gauge", () => {
    const text = v0.replace(
      'vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen3-0.6B"} 0.0',
      'vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen3-0.6B"} 0.55',
    );
    expect(readMetrics("vllm", text).kvCacheUsage).toBe(0.55);
  });

  it("sums running, waiting and token counters over model_name and engine label sets", () => {
    const text = v1
      .replace(
        'vllm:num_requests_running{engine="0",model_name="llama-vllm-single"} 0.0',
        'vllm:num_requests_running{engine="0",model_name="llama-vllm-single"} 2.0\n' +
          'vllm:num_requests_running{engine="1",model_name="llama-vllm-single"} 3.0',
      )
      .concat(
        // A second model whose series arrive in a separate block, after everything else.
        'vllm:num_requests_waiting{engine="0",model_name="other-model"} 4.0\n' +
          'vllm:generation_tokens_total{engine="0",model_name="other-model"} 250.0\n',
      );
    const result = readMetrics("vllm", text);
    expect(result).toMatchObject({ running: 5, waiting: 4, queueDepth: 9 });
    expect(result.generationTokensTotal).toBe(250);
  });

  it("reports the fullest engine's KV cache, not a sum above 1", () => {
    const text = v1.replace(
      'vllm:kv_cache_usage_perc{engine="0",model_name="llama-vllm-single"} 0.0',
      'vllm:kv_cache_usage_perc{engine="0",model_name="llama-vllm-single"} 0.9\n' +
        'vllm:kv_cache_usage_perc{engine="1",model_name="llama-vllm-single"} 0.6',
    );
    expect(readMetrics("vllm", text).kvCacheUsage).toBe(0.9);
  });

  it("reads the simulator's instance id and DCGM free memory when present", () => {
    const text =
      v0 +
      "# HELP zml_sim_instance_info Identity of this simulated serving process.\n" +
      "# TYPE zml_sim_instance_info gauge\n" +
      'zml_sim_instance_info{instance_id="sim-7f3a"} 1\n' +
      'DCGM_FI_DEV_FB_FREE{gpu="0",modelName="NVIDIA H100 80GB HBM3"} 40960\n' +
      'DCGM_FI_DEV_FB_FREE{gpu="1",modelName="NVIDIA H100 80GB HBM3"} 20480\n';
    expect(readMetrics("vllm", text)).toMatchObject({ instanceId: "sim-7f3a", freeMemoryGib: 60 });
  });

  it("keeps the last sample of a body without a trailing newline", () => {
    const text = "vllm:num_requests_running 2\nvllm:num_requests_waiting 3";
    expect(readMetrics("vllm", text)).toMatchObject({ running: 2, waiting: 3 });
  });

  it("names a missing required series", () => {
    const text = v0
      .split("\n")
      .filter((line) => !line.includes("vllm:num_requests_waiting"))
      .join("\n");
    const error = readError(() => readMetrics("vllm", text));
    expect(error.code).toBe("metrics_unreadable");
    expect(error.missing).toEqual(["vllm:num_requests_waiting"]);
    expect(error.message).toContain("vllm:num_requests_waiting");
  });

  it("rejects a required series whose value is not a number", () => {
    const text = v1.replace(
      'vllm:num_requests_running{engine="0",model_name="llama-vllm-single"} 0.0',
      'vllm:num_requests_running{engine="0",model_name="llama-vllm-single"} NaN',
    );
    expect(readError(() => readMetrics("vllm", text)).missing).toEqual([
      "vllm:num_requests_running",
    ]);
  });

  it("does not mistake a TGI exposition for vLLM", () => {
    const error = readError(() => readMetrics("vllm", fixture("tgi-assembled.prom")));
    expect(error.missing).toEqual(["vllm:num_requests_running", "vllm:num_requests_waiting"]);
  });
});

describe("readMetrics: TGI (assembled from TGI's real names and formats)", () => {
  const tgi = fixture("tgi-assembled.prom");

  it("reads batch size as running, queue size as waiting and histogram sums as token totals", () => {
    expect(readMetrics("tgi", tgi)).toEqual({
      running: 5,
      waiting: 3,
      queueDepth: 8,
      kvCacheUsage: null,
      freeMemoryGib: null,
      promptTokensTotal: 62282,
      generationTokensTotal: 32806,
      tokenLatency: null,
      instanceId: null,
      prefixCache: null,
      prefill: null,
      kvCacheCapacityTokens: null,
      servedModels: null,
      slots: null,
    });
  });

  it("reads TGI's mean time per token histogram as seconds per output token", () => {
    const name = "tgi_request_mean_time_per_token_duration";
    const text =
      tgi +
      `\n# TYPE ${name} histogram\n${name}_bucket{le="+Inf"} 4\n${name}_sum 0.08\n${name}_count 4\n`;
    expect(readMetrics("tgi", text).tokenLatency).toEqual({ seconds: 0.08, count: 4 });
  });

  it("reads older TGI output that has TYPE lines only, or no metadata at all", () => {
    const typeOnly = tgi
      .split("\n")
      .filter((line) => !line.startsWith("# HELP"))
      .join("\n");
    const bare = tgi
      .split("\n")
      .filter((line) => !line.startsWith("#"))
      .join("\n");
    for (const text of [typeOnly, bare]) {
      expect(readMetrics("tgi", text)).toMatchObject({
        running: 5,
        waiting: 3,
        generationTokensTotal: 32806,
      });
    }
  });

  it("reads an exposition with no samples as an idle server", () => {
    for (const text of ["", "\n", "# HELP tgi_queue_size Current queue size\n"]) {
      expect(readMetrics("tgi", text)).toMatchObject({ running: 0, waiting: 0, queueDepth: 0 });
    }
  });

  it("names the missing gauge when requests were seen but a gauge is absent", () => {
    const text = tgi
      .split("\n")
      .filter((line) => !line.includes("tgi_batch_current_size"))
      .join("\n");
    expect(readError(() => readMetrics("tgi", text)).missing).toEqual(["tgi_batch_current_size"]);
  });
});

describe("readMetrics: garbage", () => {
  const garbage = [
    "garbage",
    "<html><body>502 Bad Gateway</body></html>",
    '{"status":"ok"}',
    'vllm:num_requests_running{model_name="unterminated 3',
    // Well-formed, but a histogram where both engines' gauges are required.
    '# TYPE x histogram\nx_sum 1\nx_bucket{le="1"} 1\n',
  ];

  it.each(garbage)("turns %j into a MetricsReadError for both frameworks", (text) => {
    expect(readError(() => readMetrics("vllm", text)).code).toBe("metrics_unreadable");
    expect(readError(() => readMetrics("tgi", text)).code).toBe("metrics_unreadable");
  });

  it("rejects an empty vLLM exposition (vLLM always exports its gauges)", () => {
    expect(readError(() => readMetrics("vllm", "")).missing).toHaveLength(2);
  });

  it("never throws anything but MetricsReadError, whatever the text", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("vllm" as const, "tgi" as const),
        fc.string({ unit: "binary", maxLength: 300 }),
        (framework, text) => {
          try {
            readMetrics(framework, text);
          } catch (error) {
            if (!(error instanceof MetricsReadError)) throw error;
          }
        },
      ),
    );
  });

  it("rejects a non-string body", () => {
    expect(readError(() => readMetrics("vllm", undefined as unknown as string)).code).toBe(
      "metrics_unreadable",
    );
  });
});
