// The reference makes the package's local declaration travel with this module: services that
// import @zml/health type-check this file inside their own program, which would otherwise not
// include the declaration and would reject the untyped import.
// eslint-disable-next-line @typescript-eslint/triple-slash-reference
/// <reference path="./parse-prometheus-text-format.d.ts" />
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import type { PrometheusFamily, PrometheusSample } from "parse-prometheus-text-format";
import { MetricsReadError } from "./errors.ts";
import type { ReadingSource } from "./errors.ts";

/**
 * Prometheus text exposition, parsed once and looked up by series name. Shared by every
 * engine's reader; knows nothing of any engine.
 */
export interface Exposition {
  readonly families: FamilyIndex;
  /** The raw text, for the series the parser drops (labelled histograms' `_sum`/`_count`). */
  readonly text: string;
}

/** Families by name; a name split over non-adjacent blocks is merged. Empty families dropped. */
export type FamilyIndex = Map<string, { type: string; samples: PrometheusSample[] }>;

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
  let families: unknown;
  try {
    // The parser emits a family only when a later line closes it, so without a trailing
    // newline it silently drops the last sample line.
    families = parsePrometheusTextFormat(`${text}\n`);
  } catch (error) {
    // The parser throws on malformed lines and, for some malformed histograms, fails inside
    // its own bookkeeping; either way the body is not usable exposition text.
    const reason = error instanceof Error ? error.message : String(error);
    throw new MetricsReadError(source, `unreadable ${source} metrics: ${reason}`);
  }
  if (!Array.isArray(families)) {
    throw new MetricsReadError(source, `unreadable ${source} metrics: parser returned no families`);
  }
  const index: FamilyIndex = new Map();
  for (const family of families as PrometheusFamily[]) {
    if (family.metrics.length === 0) continue;
    const entry = index.get(family.name);
    if (entry) entry.samples.push(...family.metrics);
    else index.set(family.name, { type: family.type, samples: [...family.metrics] });
  }
  return { families: index, text };
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
  return e.families.get(name)?.samples;
}

/** Sample values of a gauge or counter, or `undefined` when the series is absent. */
export function values(e: Exposition, name: string): number[] | undefined {
  return samples(e, name)?.map((sample) => Number(sample.value ?? Number.NaN));
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

/** `_sum` of an unlabelled histogram, whether or not the exposition declared its type. */
export function histogramSum(e: Exposition, name: string): number | null {
  const family = e.families.get(name);
  if (family !== undefined) {
    const sums = family.samples
      .map((sample) => sample.sum)
      .filter((value): value is string => value !== undefined)
      .map(Number);
    if (sums.length > 0 && sums.every(Number.isFinite)) return sum(sums);
  }
  // Without a TYPE line the parser files `<name>_sum` as a family of its own.
  return optionalSum(e, `${name}_sum`);
}

/**
 * Sum of every sample line of `series` (`series{labels} value [timestamp]`), read from the
 * text: the parser drops the `_sum` and `_count` of a histogram whose samples carry labels,
 * and files a counter under its TYPE name whether or not that carries `_total`. `null` when
 * there is none or one is not a finite number.
 */
export function seriesTotal(e: Exposition, series: string): number | null {
  const text = e.text;
  let total: number | null = null;
  let from = text.indexOf(series);
  while (from !== -1) {
    const lineStart = from === 0 || text[from - 1] === "\n";
    const next = text[from + series.length];
    if (lineStart && (next === "{" || next === " " || next === "\t")) {
      const lineEnd = text.indexOf("\n", from);
      const line = text.slice(from + series.length, lineEnd === -1 ? undefined : lineEnd);
      // Label values may hold anything but the value comes after the last closing brace.
      const rest = next === "{" ? line.slice(line.lastIndexOf("}") + 1) : line;
      const value = Number(rest.trim().split(/\s+/)[0]);
      if (!Number.isFinite(value)) return null;
      total = (total ?? 0) + value;
    }
    from = text.indexOf(series, from + series.length);
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
