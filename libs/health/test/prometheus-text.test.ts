import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  histogramSeries,
  parsePrometheusText,
  parseValue,
  PrometheusTextError,
} from "../src/index.ts";
import { fixture } from "./helpers.ts";

const FIXTURES = [
  "vllm-v0-qwen3-0.6b.prom",
  "vllm-v1-llama-kserve.prom",
  "tgi-assembled.prom",
  "llamacpp-b1-80fb11a-loaded.prom",
  "sglang-docs-form.prom",
];

function parseError(text: string): PrometheusTextError {
  try {
    parsePrometheusText(text);
  } catch (error) {
    expect(error).toBeInstanceOf(PrometheusTextError);
    return error as PrometheusTextError;
  }
  throw new Error(`expected ${JSON.stringify(text)} to be rejected`);
}

describe("parsePrometheusText: real engine texts", () => {
  it.each(FIXTURES)("keeps every sample line of %s, each in one family", (name) => {
    const text = fixture(name);
    const sampleLines = text.split("\n").filter((line) => {
      const trimmed = line.trim();
      return trimmed !== "" && !trimmed.startsWith("#");
    });
    const parsed = parsePrometheusText(text);
    const bySeries = [...parsed.series.values()].reduce((n, list) => n + list.length, 0);
    const byFamily = [...parsed.families.values()].reduce((n, f) => n + f.samples.length, 0);
    expect(sampleLines.length).toBeGreaterThan(10);
    expect(bySeries).toBe(sampleLines.length);
    expect(byFamily).toBe(sampleLines.length);
  });

  it("keeps a labelled vLLM histogram whole: buckets, _sum and _count", () => {
    const parsed = parsePrometheusText(fixture("vllm-v0-qwen3-0.6b.prom"));
    const [series, ...others] = histogramSeries(parsed, "vllm:time_per_output_token_seconds");
    expect(others).toEqual([]);
    expect(series?.labels).toEqual({ model_name: "Qwen/Qwen3-0.6B" });
    expect(series?.sum).toBe(2.254702091217041);
    expect(series?.count).toBe(106);
    expect(series?.buckets.at(-1)).toEqual({ le: Infinity, count: 106 });
    expect(series?.buckets[0]).toEqual({ le: 0.01, count: 0 });
    // Cumulative, as the format requires.
    const counts = series?.buckets.map((b) => b.count) ?? [];
    expect(counts).toEqual([...counts].sort((a, b) => a - b));
    const family = parsed.families.get("vllm:time_per_output_token_seconds");
    expect(family?.type).toBe("histogram");
    expect(family?.samples.map((s) => s.name)).toContain("vllm:time_per_output_token_seconds_sum");
  });

  it("files vLLM V1 counters' _total and _created samples under their TYPE name", () => {
    const text =
      "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.\n" +
      "# TYPE vllm:prefix_cache_queries counter\n" +
      'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 50.0\n' +
      'vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e+09\n' +
      'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n';
    const parsed = parsePrometheusText(text);
    const counter = parsed.families.get("vllm:prefix_cache_queries");
    expect(counter?.type).toBe("counter");
    expect(counter?.samples.map((s) => s.name)).toEqual([
      "vllm:prefix_cache_queries_total",
      "vllm:prefix_cache_queries_created",
    ]);
    // A sample the announced family cannot hold is a family of its own.
    expect(parsed.families.get("vllm:num_requests_running")).toMatchObject({
      type: "untyped",
      samples: [{ labels: { engine: "0", model_name: "m" }, value: 2, timestamp: null }],
    });
    expect(parsed.families.get("vllm:prefix_cache_queries_total")?.help).toBe(
      "Prefix cache queries, in terms of number of queried tokens.",
    );
  });
});

describe("parsePrometheusText: the format", () => {
  it("decodes escaped label values, and keeps braces, commas and unknown escapes inside them", () => {
    const text =
      'msdos_file_access_time_seconds{path="C:\\\\DIR\\\\FILE.TXT",error="Cannot find file:\\n\\"FILE.TXT\\""} 1.458255915e9\n' +
      'odd{a="x}y,z=\\"w\\"",b="\\t"} 1\n';
    const parsed = parsePrometheusText(text);
    expect(parsed.series.get("msdos_file_access_time_seconds")?.[0]).toEqual({
      name: "msdos_file_access_time_seconds",
      labels: { path: "C:\\DIR\\FILE.TXT", error: 'Cannot find file:\n"FILE.TXT"' },
      value: 1.458255915e9,
      timestamp: null,
    });
    expect(parsed.series.get("odd")?.[0]?.labels).toEqual({ a: 'x}y,z="w"', b: "\\t" });
  });

  it("reads NaN, infinities, timestamps, and ignores exemplars and other comments", () => {
    const text = [
      "# A comment",
      "# UNIT x_seconds seconds",
      "a NaN",
      "b +Inf",
      "c -Inf 1395066363000",
      "d Inf",
      'something_weird{problem="division by zero"} +Inf -3982045',
      'x_seconds_bucket{le="0.5"} 3 # {trace_id="KOO5S4vxi0o"} 0.67',
      'x_seconds_bucket{le="+Inf"} 4 1520879607.789 # {trace_id="oHg5SJYRHA0"} 9.8 1520879602.015',
      '  padded{ a = "1" , } 2\t',
      "crlf 3\r",
      "# EOF",
    ].join("\n");
    const parsed = parsePrometheusText(text);
    const value = (name: string) => parsed.series.get(name)?.map((s) => s.value);
    expect(value("a")).toEqual([Number.NaN]);
    expect(value("b")).toEqual([Infinity]);
    expect(value("c")).toEqual([-Infinity]);
    expect(parsed.series.get("c")?.[0]?.timestamp).toBe(1395066363000);
    expect(value("d")).toEqual([Infinity]);
    expect(parsed.series.get("something_weird")?.[0]).toMatchObject({
      value: Infinity,
      timestamp: -3982045,
    });
    expect(histogramSeries(parsed, "x_seconds")).toEqual([
      {
        labels: {},
        buckets: [
          { le: 0.5, count: 3 },
          { le: Infinity, count: 4 },
        ],
        sum: null,
        count: null,
      },
    ]);
    expect(parsed.series.get("padded")?.[0]).toMatchObject({ labels: { a: "1" }, value: 2 });
    expect(value("crlf")).toEqual([3]);
    expect(parsed.families.size).toBe(8);
  });

  it("groups a histogram's label sets apart, in any line order", () => {
    const text =
      "# TYPE h histogram\n" +
      'h_sum{m="b"} 7\n' +
      'h_bucket{m="a",le="1"} 1\n' +
      'h_bucket{le="+Inf",m="a"} 2\n' +
      'h_count{m="a"} 2\n' +
      'h_sum{m="a"} 1.5\n' +
      'h_bucket{m="b",le="+Inf"} 3\n' +
      'h_count{m="b"} 3\n';
    expect(histogramSeries(parsePrometheusText(text), "h")).toEqual([
      {
        labels: { m: "a" },
        buckets: [
          { le: 1, count: 1 },
          { le: Infinity, count: 2 },
        ],
        sum: 1.5,
        count: 2,
      },
      { labels: { m: "b" }, buckets: [{ le: Infinity, count: 3 }], sum: 7, count: 3 },
    ]);
    expect(histogramSeries(parsePrometheusText(text), "absent")).toEqual([]);
  });

  it("merges a family spread over non-adjacent blocks, and unescapes HELP text", () => {
    const text =
      '# HELP g A \\\\ gauge\\nover two lines\n# TYPE g gauge\ng 1\nother 2\n# TYPE g gauge\ng{x="1"} 3\n';
    const parsed = parsePrometheusText(text);
    expect(parsed.families.get("g")).toMatchObject({
      type: "gauge",
      help: "A \\ gauge\nover two lines",
      samples: [{ value: 1 }, { value: 3 }],
    });
  });

  it("keeps a label named __proto__ as a label", () => {
    const labels = parsePrometheusText('x{__proto__="a"} 1').series.get("x")?.[0]?.labels;
    expect(Object.keys(labels ?? {})).toEqual(["__proto__"]);
    expect(Object.getPrototypeOf(labels)).toBe(Object.prototype);
  });

  it.each([
    ["garbage", 1, "garbage has no value"],
    ["<html><body>502</body></html>", 1, "expected a metric name"],
    ['{"status":"ok"}', 1, "expected a metric name"],
    ['ok 1\nvllm:x{model_name="unterminated 3', 2, "unterminated value of label model_name"],
    ['x{1a="b"} 1', 1, "expected a label name"],
    ['x{a="1",a="2"} 1', 1, "duplicate label a"],
    ['x{a="1" b="2"} 1', 1, "expected , or } after label a"],
    ["x{a=1} 1", 1, "expected a quoted value for label a"],
    ["x{a} 1", 1, "expected = after label a"],
    ["x one", 1, "x has a value that is not a number: one"],
    ["x 1 soon", 1, "x has a timestamp that is not a number: soon"],
    ["x 1 2 3", 1, "unexpected text after the value of x"],
    ["x-y 1", 1, "unexpected character after metric name x"],
    ["\n\n# TYPE x kind\nx 1", 3, 'unknown metric type "kind" for x'],
    ["# TYPE\n", 1, "# TYPE line without a valid metric name"],
    ["# HELP 9x help\n", 1, "# HELP line without a valid metric name"],
  ])("rejects %j at line %i: %s", (text, line, reason) => {
    const error = parseError(text);
    expect(error.line).toBe(line);
    expect(error.message).toBe(`line ${line}: ${reason}`);
  });

  it("never throws anything but PrometheusTextError, whatever the text", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 300 }), (text) => {
        try {
          parsePrometheusText(text);
        } catch (error) {
          if (!(error instanceof PrometheusTextError)) throw error;
        }
      }),
    );
  });

  it("reads back any sample written in the format", () => {
    const name = fc.stringMatching(/^[a-zA-Z_:][a-zA-Z0-9_:]{0,20}$/);
    const labelName = fc.stringMatching(/^[a-zA-Z_][a-zA-Z0-9_]{0,10}$/);
    const escape = (v: string) =>
      v.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
    fc.assert(
      fc.property(
        name,
        fc.dictionary(labelName, fc.string({ unit: "grapheme", maxLength: 12 }), { maxKeys: 4 }),
        fc.double(),
        fc.option(fc.integer({ min: -1e12, max: 1e12 }), { nil: null }),
        (metric, labels, value, timestamp) => {
          const entries = Object.entries(labels);
          const written =
            metric +
            (entries.length === 0
              ? ""
              : `{${entries.map(([k, v]) => `${k}="${escape(v)}"`).join(",")}}`) +
            ` ${Number.isNaN(value) ? "NaN" : value === Infinity ? "+Inf" : value === -Infinity ? "-Inf" : Object.is(value, -0) ? "-0" : String(value)}` +
            (timestamp === null ? "" : ` ${timestamp}`);
          const [sample] = parsePrometheusText(written).series.get(metric) ?? [];
          expect(sample).toEqual({ name: metric, labels, value, timestamp });
        },
      ),
    );
  });
});

describe("parseValue", () => {
  it("reads what Go's ParseFloat reads, and nothing else", () => {
    expect(parseValue("1")).toBe(1);
    expect(parseValue("-0.5e-3")).toBe(-0.0005);
    expect(parseValue("1.0")).toBe(1);
    expect(parseValue("nan")).toBeNaN();
    expect(parseValue("-Infinity")).toBe(-Infinity);
    expect(parseValue("+inf")).toBe(Infinity);
    expect(parseValue("")).toBeUndefined();
    expect(parseValue("1,5")).toBeUndefined();
    expect(parseValue("None")).toBeUndefined();
  });
});
