// A node of our own that counts, at the node, how many inference requests it holds at once:
// exactly (the peak at every arrival) and by a sampler every few ms, as an operator's probe
// would. Its /metrics report the true running count, like vLLM's, so the health aggregator
// polls a real depth. Answers come from the test's handler.
import type { ServerResponse } from "node:http";
import { startHostileNode } from "./hostile-node.ts";
import type { HostileNode, InferenceHandler } from "./hostile-node.ts";

export interface CountingNode extends HostileNode {
  /** Requests held right now. */
  inFlight(): number;
  /** The most held at once since the last reset, counted at every arrival. */
  peak(): number;
  /** The most seen by the sampler since the last reset, and how many samples it took. */
  sampledPeak(): { peak: number; samples: number };
  resetPeaks(): void;
}

export async function startCountingNode(
  handler: InferenceHandler,
  options: { sampleEveryMs?: number } = {},
): Promise<CountingNode> {
  let inFlight = 0;
  let peak = 0;
  let sampledPeak = 0;
  let samples = 0;
  const metrics = (res: ServerResponse) => {
    res.writeHead(200, { "content-type": "text/plain; version=0.0.4" });
    res.end(
      [
        "# TYPE vllm:num_requests_running gauge",
        `vllm:num_requests_running{model_name="m"} ${inFlight}`,
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{model_name="m"} 0',
        "",
      ].join("\n"),
    );
  };
  const node = await startHostileNode(
    (req, res) => {
      inFlight++;
      peak = Math.max(peak, inFlight);
      res.once("close", () => inFlight--);
      handler(req, res);
    },
    { metrics },
  );
  const sampler = setInterval(() => {
    samples++;
    sampledPeak = Math.max(sampledPeak, inFlight);
  }, options.sampleEveryMs ?? 2);
  return {
    ...node,
    inFlight: () => inFlight,
    peak: () => peak,
    sampledPeak: () => ({ peak: sampledPeak, samples }),
    resetPeaks() {
      peak = inFlight;
      sampledPeak = inFlight;
      samples = 0;
    },
    async close() {
      clearInterval(sampler);
      await node.close();
    },
  };
}
