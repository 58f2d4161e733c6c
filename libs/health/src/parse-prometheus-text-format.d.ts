// The package ships no types. This declares the part of its output this library reads; every
// number stays a string exactly as it appeared in the exposition.
declare module "parse-prometheus-text-format" {
  /** One sample (or, for histograms and summaries, one flattened series). */
  export interface PrometheusSample {
    value?: string;
    labels?: Record<string, string>;
    timestamp_ms?: string;
    buckets?: Record<string, string>;
    quantiles?: Record<string, string>;
    count?: string;
    sum?: string;
  }

  /** One metric family: consecutive lines sharing a name. */
  export interface PrometheusFamily {
    name: string;
    help: string;
    /** `COUNTER`, `GAUGE`, `HISTOGRAM`, `SUMMARY` or `UNTYPED`. */
    type: string;
    metrics: PrometheusSample[];
  }

  /** Parses Prometheus text exposition format; throws on lines it cannot read. */
  export default function parsePrometheusTextFormat(text: string): PrometheusFamily[];
}
