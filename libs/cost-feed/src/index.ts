export { PRICE_ERROR_KINDS, PriceSourceError } from "./errors.ts";
export type { PriceErrorKind } from "./errors.ts";
export type { PriceProblem, PriceQuote, PriceResult, PriceSource, PriceTarget } from "./types.ts";
export { MAX_USD_PER_GPU_HOUR, perGpuHour } from "./normalise.ts";
export { AWS_SOURCE, createAwsSpotSource } from "./aws.ts";
export type { AwsSpotSourceOptions } from "./aws.ts";
