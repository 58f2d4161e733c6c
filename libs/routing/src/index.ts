export {
  CloudSpotCostSchema,
  OnPremCostSchema,
  CostEntrySchema,
  QualityScoreSchema,
} from "./schemas.ts";
export type { CloudSpotCost, OnPremCost, CostEntry, QualityScore } from "./schemas.ts";
export { DEFAULT_ROUTING_OPTIONS, resolveOptions } from "./options.ts";
export type { RoutingOptions } from "./options.ts";
export { buildSnapshot } from "./snapshot.ts";
export { resolveNodePrice, priceAgeS, costEntryStatus } from "./price.ts";
export type { NodePrice, PriceSource, CostEntryStatus } from "./price.ts";
export type { RoutingSnapshot, SnapshotInput, FamilyGroup, ModelTierBucket } from "./snapshot.ts";
export {
  compilePolicy,
  builtinDefaultPolicy,
  resolvePolicy,
  DEFAULT_POLICY_NAME,
} from "./policy.ts";
export type { ResolvedPolicy, PolicyResolution, PolicySource, PolicyCatalog } from "./policy.ts";
export { createLiveTable, LIVE_STATUS } from "./live-table.ts";
export type { LiveTable } from "./live-table.ts";
export { createPeerInFlightTable } from "./peer-in-flight.ts";
export type { PeerInFlightTable } from "./peer-in-flight.ts";
export { decide } from "./decide.ts";
export {
  promptPrefixOf,
  encodePromptPrefix,
  decodePromptPrefix,
  tokensOfChars,
  PREFIX_BLOCK_CHARS,
  PREFIX_MAX_BLOCKS,
  CHARS_PER_TOKEN,
} from "./prompt-prefix.ts";
export type { PromptPrefix } from "./prompt-prefix.ts";
export { PrefixIndex } from "./prefix-index.ts";
export type { PrefixMatch } from "./prefix-index.ts";
export { firstByteTimeoutMs, FIRST_BYTE_FLOOR_MS, PLAIN_ANSWER_HEADROOM } from "./first-byte.ts";
export type { FirstByteInput } from "./first-byte.ts";
export {
  MAX_ATTEMPTS,
  MIN_RETRY_WINDOW_MS,
  nextAttempt,
  classifyFailure,
  shouldCoolDown,
} from "./attempts.ts";
export type {
  AttemptFailure,
  FailedAttempt,
  NextAttempt,
  NextAttemptInput,
  StopReason,
} from "./attempts.ts";
export { RoutingError, ROUTING_ERROR_CODES } from "./errors.ts";
export type { RoutingErrorCode } from "./errors.ts";
export type {
  RouteRequest,
  ProviderSort,
  RankingMode,
  Decision,
  RankedCandidate,
  PassedOver,
  PassOverReason,
  NodeEntry,
  Rejection,
  RejectionReason,
} from "./types.ts";
