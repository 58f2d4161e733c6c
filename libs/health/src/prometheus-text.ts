/**
 * Prometheus text exposition format (version 0.0.4), and the OpenMetrics lines engines mix into
 * it (exemplars, `# UNIT`, `# EOF`), parsed into typed samples. Every sample line is kept as it
 * is, including a labelled histogram's `_sum` and `_count`, so one parse serves every reader.
 *
 * No npm parser fits: `parse-prometheus-text-format` ships no types and drops the `_sum` and
 * `_count` of a histogram whose samples carry labels (every vLLM histogram); `exposition`
 * rejects names with a colon (`vllm:…`) and keeps label escapes undecoded.
 */

/** One sample line: `name{labels} value [timestamp] [# exemplar]`. */
export interface PrometheusSample {
  /** The line's own name, suffix included (`x_bucket`, `x_sum`, `x_total`). */
  readonly name: string;
  /** Label values with `\\`, `\"` and `\n` decoded. */
  readonly labels: Readonly<Record<string, string>>;
  /** `NaN`, `+Inf` and `-Inf` as their numbers. */
  readonly value: number;
  /** The timestamp as written (ms in 0.0.4), `null` when the line has none. */
  readonly timestamp: number | null;
}

export const METRIC_TYPES = [
  "counter",
  "gauge",
  "histogram",
  "summary",
  "untyped",
  // OpenMetrics.
  "unknown",
  "info",
  "stateset",
  "gaugehistogram",
] as const;
export type MetricType = (typeof METRIC_TYPES)[number];

/** A family: the samples that a `# TYPE`/`# HELP` name announces, or one untyped name. */
export interface MetricFamily {
  readonly name: string;
  /** `untyped` when no `# TYPE` line named it. */
  readonly type: MetricType;
  readonly help: string;
  readonly samples: readonly PrometheusSample[];
}

/** A parsed exposition: every sample by its own name, and every family by its name. */
export interface PrometheusText {
  /** Sample lines by their own name (`x_bucket`, `x_sum`, …), in text order. */
  readonly series: ReadonlyMap<string, readonly PrometheusSample[]>;
  /** Families by name. A name spread over non-adjacent blocks is one family. */
  readonly families: ReadonlyMap<string, MetricFamily>;
}

/** One label set of a histogram: its buckets, `_sum` and `_count`. */
export interface HistogramSeries {
  /** The labels of the series, `le` excluded. */
  readonly labels: Readonly<Record<string, string>>;
  /** Cumulative counts by upper bound, in text order; `+Inf` as `Infinity`. */
  readonly buckets: readonly { readonly le: number; readonly count: number }[];
  /** `null` when the text has no `_sum` for this label set. */
  readonly sum: number | null;
  /** `null` when the text has no `_count` for this label set. */
  readonly count: number | null;
}

/** A line that is not exposition format; `line` is 1-based. */
export class PrometheusTextError extends Error {
  readonly line: number;
  constructor(line: number, reason: string) {
    super(`line ${line}: ${reason}`);
    this.name = "PrometheusTextError";
    this.line = line;
  }
}

/** The name suffixes each type's samples may carry after the family name. */
const SUFFIXES: Record<MetricType, readonly string[]> = {
  counter: ["", "_total", "_created"],
  gauge: [""],
  histogram: ["_bucket", "_sum", "_count", "_created"],
  gaugehistogram: ["_bucket", "_gsum", "_gcount"],
  summary: ["", "_sum", "_count", "_created"],
  info: ["", "_info"],
  stateset: [""],
  untyped: [""],
  unknown: [""],
};

const TYPES: ReadonlySet<string> = new Set(METRIC_TYPES);

interface MutableFamily {
  name: string;
  type: MetricType;
  help: string;
  samples: PrometheusSample[];
}

/**
 * Parses a whole exposition. Blank lines and comments other than `# HELP` and `# TYPE` are
 * skipped; an exemplar (`# {…} value`) after a sample is ignored. Leading and trailing
 * whitespace of a line, and a `\r` before the newline, are tolerated.
 *
 * @throws {PrometheusTextError} at the first line that is not exposition format: a bad metric
 * or label name, an unterminated label set, a missing or non-numeric value or timestamp, text
 * after them, a duplicate label, or a `# TYPE` line with an unknown type.
 */
export function parsePrometheusText(text: string): PrometheusText {
  const series = new Map<string, PrometheusSample[]>();
  const families = new Map<string, MutableFamily>();
  // The family the last `# TYPE` or `# HELP` line announced; its samples follow it.
  let announced: MutableFamily | undefined;
  let lineNo = 0;
  let start = 0;
  while (start <= text.length) {
    let end = text.indexOf("\n", start);
    if (end === -1) end = text.length;
    lineNo++;
    const line = trimmed(text, start, end);
    start = end + 1;
    if (line === "") continue;
    if (line.charCodeAt(0) === HASH) {
      const meta = metadata(line, lineNo);
      if (meta === null) continue;
      let family = families.get(meta.name);
      if (family === undefined) {
        family = { name: meta.name, type: "untyped", help: "", samples: [] };
        families.set(meta.name, family);
      }
      if (meta.type !== undefined) family.type = meta.type;
      if (meta.help !== undefined) family.help = meta.help;
      announced = family;
      continue;
    }
    const sample = sampleLine(line, lineNo);
    const list = series.get(sample.name);
    if (list === undefined) series.set(sample.name, [sample]);
    else list.push(sample);
    let family =
      announced !== undefined && belongsTo(sample.name, announced) ? announced : undefined;
    if (family === undefined) {
      family = families.get(sample.name);
      if (family === undefined) {
        family = { name: sample.name, type: "untyped", help: "", samples: [] };
        families.set(sample.name, family);
      }
    }
    family.samples.push(sample);
  }
  return { series, families };
}

/**
 * Every label set of histogram `name`, from its `_bucket`, `_sum` and `_count` lines in any
 * order (label sets with buckets first, in text order). Empty when the text has none.
 */
export function histogramSeries(
  parsed: Pick<PrometheusText, "series">,
  name: string,
): HistogramSeries[] {
  const byLabels = new Map<
    string,
    {
      labels: Record<string, string>;
      buckets: { le: number; count: number }[];
      sum: number | null;
      count: number | null;
    }
  >();
  const entry = (labels: Readonly<Record<string, string>>) => {
    const own: Record<string, string> = {};
    for (const key of Object.keys(labels).sort()) {
      if (key !== "le") own[key] = labels[key]!;
    }
    const key = JSON.stringify(own);
    let found = byLabels.get(key);
    if (found === undefined) {
      found = { labels: own, buckets: [], sum: null, count: null };
      byLabels.set(key, found);
    }
    return found;
  };
  for (const sample of parsed.series.get(`${name}_bucket`) ?? []) {
    const le = sample.labels["le"];
    if (le === undefined) continue;
    entry(sample.labels).buckets.push({ le: parseValue(le) ?? Number.NaN, count: sample.value });
  }
  for (const sample of parsed.series.get(`${name}_sum`) ?? [])
    entry(sample.labels).sum = sample.value;
  for (const sample of parsed.series.get(`${name}_count`) ?? []) {
    entry(sample.labels).count = sample.value;
  }
  return [...byLabels.values()];
}

const HASH = 0x23;
const SPACE = 0x20;
const TAB = 0x09;
const CR = 0x0d;

function isBlank(code: number): boolean {
  return code === SPACE || code === TAB || code === CR;
}

function trimmed(text: string, start: number, end: number): string {
  let from = start;
  let to = end;
  while (from < to && isBlank(text.charCodeAt(from))) from++;
  while (to > from && isBlank(text.charCodeAt(to - 1))) to--;
  return text.slice(from, to);
}

function belongsTo(sampleName: string, family: MutableFamily): boolean {
  if (!sampleName.startsWith(family.name)) return false;
  return SUFFIXES[family.type].includes(sampleName.slice(family.name.length));
}

/** `# HELP name text` or `# TYPE name type`; `null` for any other comment. */
function metadata(
  line: string,
  lineNo: number,
): { name: string; type?: MetricType; help?: string } | null {
  const keyword = line.startsWith("# HELP") ? "HELP" : line.startsWith("# TYPE") ? "TYPE" : null;
  // `# HELPFUL note` is a plain comment.
  if (keyword === null || (line.length > 6 && !isBlank(line.charCodeAt(6)))) return null;
  const rest = line.slice(6).replace(/^[ \t]+/, "");
  const nameEnd = metricNameEnd(rest, 0);
  const name = rest.slice(0, nameEnd);
  if (name === "" || (nameEnd < rest.length && !isBlank(rest.charCodeAt(nameEnd)))) {
    throw new PrometheusTextError(lineNo, `# ${keyword} line without a valid metric name`);
  }
  const after = rest.slice(nameEnd).replace(/^[ \t]+/, "");
  if (keyword === "HELP") return { name, help: unescapeHelp(after) };
  const type = after.toLowerCase();
  if (!TYPES.has(type)) {
    throw new PrometheusTextError(lineNo, `unknown metric type "${after}" for ${name}`);
  }
  return { name, type: type as MetricType };
}

function unescapeHelp(help: string): string {
  if (!help.includes("\\")) return help;
  return help.replace(/\\(\\|n)/g, (_, c: string) => (c === "n" ? "\n" : "\\"));
}

function isNameStart(code: number): boolean {
  return (
    (code >= 0x61 && code <= 0x7a) || // a-z
    (code >= 0x41 && code <= 0x5a) || // A-Z
    code === 0x5f || // _
    code === 0x3a // :
  );
}

function isNameChar(code: number): boolean {
  return isNameStart(code) || (code >= 0x30 && code <= 0x39);
}

/** End of a metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`) starting at `from`; `from` if none. */
function metricNameEnd(line: string, from: number): number {
  if (from >= line.length || !isNameStart(line.charCodeAt(from))) return from;
  let i = from + 1;
  while (i < line.length && isNameChar(line.charCodeAt(i))) i++;
  return i;
}

/** End of a label name (`[a-zA-Z_][a-zA-Z0-9_]*`, no colon) starting at `from`. */
function labelNameEnd(line: string, from: number): number {
  const first = line.charCodeAt(from);
  if (from >= line.length || !isNameStart(first) || first === 0x3a) return from;
  let i = from + 1;
  while (i < line.length) {
    const code = line.charCodeAt(i);
    if (!isNameChar(code) || code === 0x3a) break;
    i++;
  }
  return i;
}

function skipBlanks(line: string, from: number): number {
  let i = from;
  while (i < line.length && isBlank(line.charCodeAt(i))) i++;
  return i;
}

function tokenEnd(line: string, from: number): number {
  let i = from;
  while (i < line.length && !isBlank(line.charCodeAt(i))) i++;
  return i;
}

const NO_LABELS: Readonly<Record<string, string>> = Object.freeze({});

function sampleLine(line: string, lineNo: number): PrometheusSample {
  const nameEnd = metricNameEnd(line, 0);
  if (nameEnd === 0) throw new PrometheusTextError(lineNo, "expected a metric name");
  const name = line.slice(0, nameEnd);
  let i = nameEnd;
  let labels = NO_LABELS;
  if (line.charCodeAt(i) === 0x7b /* { */) {
    const parsed = labelSet(line, i + 1, lineNo);
    labels = parsed.labels;
    i = parsed.end;
  } else if (i < line.length && !isBlank(line.charCodeAt(i))) {
    throw new PrometheusTextError(lineNo, `unexpected character after metric name ${name}`);
  }
  i = skipBlanks(line, i);
  const valueEnd = tokenEnd(line, i);
  if (valueEnd === i) throw new PrometheusTextError(lineNo, `${name} has no value`);
  const valueText = line.slice(i, valueEnd);
  const value = parseValue(valueText);
  if (value === undefined) {
    throw new PrometheusTextError(lineNo, `${name} has a value that is not a number: ${valueText}`);
  }
  i = skipBlanks(line, valueEnd);
  let timestamp: number | null = null;
  if (i < line.length && line.charCodeAt(i) !== HASH) {
    const stampEnd = tokenEnd(line, i);
    const stampText = line.slice(i, stampEnd);
    const stamp = Number(stampText);
    if (!Number.isFinite(stamp)) {
      throw new PrometheusTextError(
        lineNo,
        `${name} has a timestamp that is not a number: ${stampText}`,
      );
    }
    timestamp = stamp;
    i = skipBlanks(line, stampEnd);
  }
  // What remains may only be an exemplar (`# {trace_id="…"} 0.5`), which no reader uses.
  if (i < line.length && line.charCodeAt(i) !== HASH) {
    throw new PrometheusTextError(lineNo, `unexpected text after the value of ${name}`);
  }
  return { name, labels, value, timestamp };
}

function labelSet(
  line: string,
  from: number,
  lineNo: number,
): { labels: Record<string, string>; end: number } {
  const labels: Record<string, string> = {};
  let i = skipBlanks(line, from);
  if (line.charCodeAt(i) === 0x7d /* } */) return { labels, end: i + 1 };
  for (;;) {
    const nameEnd = labelNameEnd(line, i);
    if (nameEnd === i) throw new PrometheusTextError(lineNo, "expected a label name");
    const labelName = line.slice(i, nameEnd);
    i = skipBlanks(line, nameEnd);
    if (line.charCodeAt(i) !== 0x3d /* = */) {
      throw new PrometheusTextError(lineNo, `expected = after label ${labelName}`);
    }
    i = skipBlanks(line, i + 1);
    if (line.charCodeAt(i) !== 0x22 /* " */) {
      throw new PrometheusTextError(lineNo, `expected a quoted value for label ${labelName}`);
    }
    const value = labelValue(line, i + 1, lineNo, labelName);
    if (Object.hasOwn(labels, labelName)) {
      throw new PrometheusTextError(lineNo, `duplicate label ${labelName}`);
    }
    if (labelName === "__proto__") {
      // Assignment would set the object's prototype rather than a label.
      Object.defineProperty(labels, labelName, {
        value: value.text,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    } else {
      labels[labelName] = value.text;
    }
    i = skipBlanks(line, value.end);
    const next = line.charCodeAt(i);
    if (next === 0x7d /* } */) return { labels, end: i + 1 };
    if (next !== 0x2c /* , */) {
      throw new PrometheusTextError(lineNo, `expected , or } after label ${labelName}`);
    }
    i = skipBlanks(line, i + 1);
    // A trailing comma before the closing brace is allowed.
    if (line.charCodeAt(i) === 0x7d) return { labels, end: i + 1 };
  }
}

/** The value of a quoted label starting after its opening quote; `end` is past the closing one. */
function labelValue(
  line: string,
  from: number,
  lineNo: number,
  labelName: string,
): { text: string; end: number } {
  const quote = line.indexOf('"', from);
  const slash = line.indexOf("\\", from);
  // The common case: no escapes before the closing quote.
  if (quote !== -1 && (slash === -1 || slash > quote)) {
    return { text: line.slice(from, quote), end: quote + 1 };
  }
  let text = "";
  let i = from;
  while (i < line.length) {
    const c = line.charCodeAt(i);
    if (c === 0x22) return { text, end: i + 1 };
    if (c === 0x5c /* \ */ && i + 1 < line.length) {
      const escaped = line[i + 1];
      // Other escapes are kept as written, as Prometheus' own clients read them.
      text +=
        escaped === "n" ? "\n" : escaped === "\\" || escaped === '"' ? escaped : `\\${escaped}`;
      i += 2;
      continue;
    }
    text += line[i];
    i++;
  }
  throw new PrometheusTextError(lineNo, `unterminated value of label ${labelName}`);
}

/**
 * A sample value as Go's `strconv.ParseFloat` (which Prometheus uses) reads it: decimal or
 * exponent notation, and `NaN`, `Inf`, `+Inf`, `-Inf`, `Infinity` in any case. `undefined`
 * when it is none of these.
 */
export function parseValue(text: string): number | undefined {
  if (text === "") return undefined;
  const n = Number(text);
  if (!Number.isNaN(n)) return n;
  const unsigned = text[0] === "+" || text[0] === "-" ? text.slice(1) : text;
  const word = unsigned.toLowerCase();
  if (word === "nan") return Number.NaN;
  if (word === "inf" || word === "infinity") return text[0] === "-" ? -Infinity : Infinity;
  return undefined;
}
