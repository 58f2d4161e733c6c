// The cost of each optional feature as its own row: for every variant a fresh stack with the
// variant's settings runs one scenario (concurrency 16, instant node by default), paired with
// direct rounds like every other scenario, so each row's ratio is judged in its own rounds.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "undici";
import { startBenchStack } from "./bench-stack.ts";
import type { BenchStack } from "./bench-stack.ts";
import type { LoadGenerator } from "./load-client.ts";
import { runScenario } from "./scenarios.ts";
import type { RunSettings, Scenario } from "./scenarios.ts";
import { summariseScenario } from "./summary.ts";
import type { FeatureRow } from "./summary.ts";

export interface FeatureVariant {
  key: string;
  title: string;
  /** Service environment on top of the bench's defaults (`LOG_LEVEL=warn`, no exporter). */
  env: (sinkUrl: string) => Record<string, string>;
  /** Scrape every service's `/metrics` this often while the load runs. */
  scrapeEveryMs?: number;
}

export const FEATURE_VARIANTS: FeatureVariant[] = [
  { key: "default", title: "as deployed by default (no exporter, warn logs)", env: () => ({}) },
  {
    key: "tracing-off",
    title: "tracing off (OTEL_SDK_DISABLED=true)",
    env: () => ({ OTEL_SDK_DISABLED: "true" }),
  },
  {
    key: "tracing-all",
    title: "tracing exported, every trace sampled",
    env: (sink) => ({
      OTEL_EXPORTER_OTLP_ENDPOINT: sink,
      OTEL_TRACES_SAMPLER: "always_on",
      OTEL_BSP_SCHEDULE_DELAY: "500",
    }),
  },
  {
    key: "tracing-10pct",
    title: "tracing exported, 10 % of traces sampled",
    env: (sink) => ({
      OTEL_EXPORTER_OTLP_ENDPOINT: sink,
      OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
      OTEL_TRACES_SAMPLER_ARG: "0.1",
      OTEL_BSP_SCHEDULE_DELAY: "500",
    }),
  },
  {
    key: "metrics-scraped",
    title: "metrics scraped every second",
    env: () => ({}),
    scrapeEveryMs: 1_000,
  },
  {
    key: "info-logs",
    title: "info logs (one line per request)",
    env: () => ({ LOG_LEVEL: "info" }),
  },
];

/** A stand-in OTLP/HTTP collector: accepts and counts export requests, keeps nothing. */
async function startOtlpSink(): Promise<{ url: string; count(): number; close(): Promise<void> }> {
  let received = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      received++;
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    count: () => received,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function startScraper(stack: BenchStack, everyMs: number): { stop(): number } {
  let scrapes = 0;
  const timer = setInterval(() => {
    for (const url of stack.opsUrls.values()) {
      request(`${url}/metrics`)
        .then(async (res) => {
          await res.body.text();
          scrapes++;
        })
        .catch(() => undefined);
    }
  }, everyMs);
  return {
    stop() {
      clearInterval(timer);
      return scrapes;
    },
  };
}

export async function measureFeatures(
  load: LoadGenerator,
  scenario: Scenario,
  settings: RunSettings,
  variants: FeatureVariant[],
  progress: (line: string) => void,
): Promise<FeatureRow[]> {
  const sink = await startOtlpSink();
  const rows: FeatureRow[] = [];
  try {
    for (const variant of variants) {
      const exportsBefore = sink.count();
      const stack = await startBenchStack({
        nodes: [scenario.node],
        serviceEnv: variant.env(sink.url),
      });
      try {
        const scraper =
          variant.scrapeEveryMs === undefined
            ? undefined
            : startScraper(stack, variant.scrapeEveryMs);
        const run = await runScenario(load, stack, scenario, settings, {
          load: load.pid,
          intake: stack.services.get("intake")?.pid,
          dispatcher: stack.services.get("dispatcher")?.pid,
          "nats-server": stack.natsPid,
          "health-aggregator": stack.services.get("health-aggregator")?.pid,
          node: stack.nodes.get(scenario.node.model)?.process.pid,
        });
        const scrapes = scraper?.stop() ?? 0;
        const summary = summariseScenario(run);
        rows.push({ key: variant.key, title: variant.title, summary, exports: 0, scrapes });
        progress(`feature ${variant.key}: ${summary.completed} requests, ${summary.failed} failed`);
      } finally {
        // Stopping flushes the services' pending spans to the sink.
        await stack.stop();
      }
      rows.at(-1)!.exports = sink.count() - exportsBefore;
    }
  } finally {
    await sink.close();
  }
  return rows;
}
