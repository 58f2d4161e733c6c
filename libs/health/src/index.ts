export {
  readMetrics,
  idleReading,
  guessFramework,
  frameworkHint,
  METRICS_FRAMEWORKS,
} from "./metrics-reading.ts";
export type {
  MetricsFramework,
  MetricsReading,
  PrefixCacheReading,
  PrefillTotals,
  TokenLatencyTotals,
} from "./metrics-reading.ts";
export { CUSTOM_HEALTH_STATUSES, CustomHealthSchema, readCustomHealth } from "./custom-health.ts";
export type { CustomHealth, CustomHealthReading, CustomHealthStatus } from "./custom-health.ts";
export { healthScore } from "./score.ts";
export type { ScoreInput } from "./score.ts";
export { DEFAULT_HEALTH_CONFIG } from "./config.ts";
export type { HealthConfig } from "./config.ts";
export {
  createNodeHealth,
  applyProbe,
  applyObservation,
  toNodeState,
  isRoutable,
  errorRateOf,
} from "./node-health.ts";
export { restoreNodeHealth } from "./restore.ts";
export { unservedModels, unlistedModels, refusesUnservedModels } from "./served-models.ts";
export type {
  NodeHealth,
  ProbeResult,
  ObservationMark,
  TokensPerSecondSample,
} from "./node-health.ts";
export {
  parsePrometheusText,
  histogramSeries,
  parseValue,
  PrometheusTextError,
  METRIC_TYPES,
} from "./prometheus-text.ts";
export type {
  PrometheusText,
  PrometheusSample,
  MetricFamily,
  MetricType,
  HistogramSeries,
} from "./prometheus-text.ts";
export { MetricsReadError, NodeMismatchError } from "./errors.ts";
export type { ReadingSource } from "./errors.ts";
