import { MetricsReadError } from "./errors.ts";
import type { ReadingSource } from "./errors.ts";
import { histogramSeries, parsePrometheusText, PrometheusTextError } from "./prometheus-text.ts";
import type { PrometheusSample, PrometheusText } from "./prometheus-text.ts";

/**
 * Prometheus text exposition, parsed once and looked up by series name. Shared by every
 * engine's reader; knows nothing of any engine.
 */
export interface Exposition {
  /** Sample lines by their own name (`x_bucket`, `x_sum`, `x_total`, …). */
  readonly series: ReadonlyMap<string, readonly PrometheusSample[]>;
  readonly text: string;
}

/** A required series that was absent or unusable. */
export interface SeriesProblem {
  readonly series: string;
  readonly reason: string;
}

/** @throws {MetricsReadError} when the text is not exposition format. */
export function parseExposition(source: ReadingSource, text: unknown): Exposition {
  if (typeof text !== "string") {
    throw new MetricsReadError(source, `unreadable ${source} metrics: body is not text`);
  }
  let parsed: PrometheusText;
  try {
    parsed = parsePrometheusText(text);
  } catch (error) {
    if (!(error instanceof PrometheusTextError)) throw error;
    throw new MetricsReadError(source, `unreadable ${source} metrics: ${error.message}`);
  }
  return { series: parsed.series, text };
}

/**
 * Judged on the raw lines rather than on the parse, because the parser silently discards
 * lines it cannot name (a JSON body parses to nothing) and those must not pass for idle.
 */
export function hasNoSampleLines(text: string): boolean {
  return text.split("\n").every((line) => {
    const trimmed = line.trim();
    return trimmed === "" || trimmed.startsWith("#");
  });
}

/** Samples of a series, or `undefined` when it is absent. */
export function samples(e: Exposition, name: string): readonly PrometheusSample[] | undefined {
  return e.series.get(name);
}

/** Sample values of a gauge or counter, or `undefined` when the series is absent. */
export function values(e: Exposition, name: string): number[] | undefined {
  return samples(e, name)?.map((sample) => sample.value);
}

/** Whole, non-negative count summed over label sets; records a problem when unusable. */
export function requiredCount(e: Exposition, name: string, problems: SeriesProblem[]): number {
  const found = values(e, name);
  if (found === undefined) {
    problems.push({ series: name, reason: `missing series ${name}` });
    return 0;
  }
  if (!found.every(Number.isFinite)) {
    problems.push({ series: name, reason: `series ${name} has a non-numeric value` });
    return 0;
  }
  return Math.max(0, Math.round(sum(found)));
}

/** The series summed over its label sets; `null` when absent or not a number. */
export function optionalSum(e: Exposition, name: string): number | null {
  const found = values(e, name);
  if (found === undefined || !found.every(Number.isFinite)) return null;
  return sum(found);
}

/** The first of `names` that is present, summed over label sets. */
export function firstSum(e: Exposition, names: readonly string[]): number | null {
  for (const name of names) {
    const total = optionalSum(e, name);
    if (total !== null) return total;
  }
  return null;
}

/** Largest sample of the first of `names` present, clamped to 0–1: a usage share. */
export function maxShare(e: Exposition, names: readonly string[]): number | null {
  for (const name of names) {
    const found = values(e, name)?.filter(Number.isFinite);
    if (found !== undefined && found.length > 0) return Math.min(1, Math.max(0, ...found));
  }
  return null;
}

/**
 * A histogram's `_sum` and `_count`, each summed over its label sets (`model_name`, vLLM V1's
 * `engine`), whether or not the exposition declared its type. `null` when either is absent
 * or not a finite number.
 */
export function histogramTotals(
  e: Exposition,
  name: string,
): { readonly sum: number; readonly count: number } | null {
  let sumTotal = 0;
  let countTotal = 0;
  let sums = 0;
  let counts = 0;
  for (const series of histogramSeries(e, name)) {
    if (series.sum !== null) {
      if (!Number.isFinite(series.sum)) return null;
      sumTotal += series.sum;
      sums++;
    }
    if (series.count !== null) {
      if (!Number.isFinite(series.count)) return null;
      countTotal += series.count;
      counts++;
    }
  }
  return sums > 0 && counts > 0 ? { sum: sumTotal, count: countTotal } : null;
}

/** `_sum` of a histogram summed over its label sets; `null` when absent or not a number. */
export function histogramSum(e: Exposition, name: string): number | null {
  return seriesTotal(e, `${name}_sum`);
}

/**
 * Sum of every sample of `series` (its own name, suffix included) over its label sets.
 * `null` when there is none or one is not a finite number.
 */
export function seriesTotal(e: Exposition, series: string): number | null {
  const found = e.series.get(series);
  if (found === undefined) return null;
  let total = 0;
  for (const sample of found) {
    if (!Number.isFinite(sample.value)) return null;
    total += sample.value;
  }
  return total;
}

/** The first of `names` with sample lines in the text, summed. */
export function firstSeriesTotal(e: Exposition, names: readonly string[]): number | null {
  for (const name of names) {
    const total = seriesTotal(e, name);
    if (total !== null) return total;
  }
  return null;
}

export function sum(numbers: readonly number[]): number {
  return numbers.reduce((total, n) => total + n, 0);
}
