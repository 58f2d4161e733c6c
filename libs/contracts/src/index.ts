export {
  ROUTE_REQUEST_SUBJECT,
  ROUTE_CANCEL_SUBJECT,
  DISPATCHER_QUEUE_GROUP,
  NODE_STATE_PREFIX,
  NODE_STATE_ALL,
  NODE_OBSERVATION_PREFIX,
  NODE_OBSERVATION_ALL,
  NODE_COOLDOWN_SUBJECT,
  ATTESTATION_VERIFY_SUBJECT,
  KV_BUCKETS,
  NODE_ID_PATTERN,
  InvalidSubjectTokenError,
  nodeStateSubject,
  nodeObservationSubject,
} from "./subjects.ts";
export type { KvBucketName } from "./subjects.ts";
export {
  HEADERS,
  TRACE_HEADERS,
  REPLY_KINDS,
  ACCEPT_REPLY_KIND,
  REPLY_BATCH,
  ROUTING_HTTP_HEADER,
  MESSAGE_TYPES,
} from "./headers.ts";
export type { ReplyKind } from "./headers.ts";
export { DISPATCHER_ALIVE_SUBJECT, DispatcherAliveSchema } from "./dispatcher-liveness.ts";
export type { DispatcherAlive } from "./dispatcher-liveness.ts";
export {
  ERROR_CODES,
  ErrorCodeSchema,
  ErrorBodySchema,
  SaturationDetailSchema,
  ZmlError,
  openAiErrorType,
  toOpenAiError,
} from "./errors.ts";
export type { ErrorCode, ErrorBody, SaturationDetail, ZmlErrorDetails } from "./errors.ts";
export {
  TierSchema,
  NODE_APIS,
  NodeApiSchema,
  DEFAULT_NODE_APIS,
  FRAMEWORKS,
  FrameworkSchema,
  COST_PRIORITIES,
  CostPrioritySchema,
  NodeSpecSchema,
  NODE_PROTOCOLS,
  MODEL_ID_PATTERN,
  ModelSpecSchema,
  PolicySpecSchema,
  AccountSpecSchema,
  RateLimitSchema,
  FleetDocumentSchema,
  NodeCloudPlacementSchema,
  CLOUD_PROVIDERS,
  CloudProviderSchema,
  CloudCredentialsSchema,
  CloudAccountSpecSchema,
} from "./fleet.ts";
export type {
  NodeCloudPlacement,
  CloudProvider,
  CloudCredentials,
  CloudAccountSpec,
  Tier,
  NodeApi,
  Framework,
  CostPriority,
  NodeSpec,
  NodeProtocol,
  ModelSpec,
  PolicySpec,
  AccountSpec,
  RateLimit,
  FleetDocument,
} from "./fleet.ts";
export {
  NODE_STATUSES,
  NodeStatusSchema,
  NodeStateSchema,
  OBSERVATION_OUTCOMES,
  NodeObservationSchema,
  NodeObservationBatchSchema,
  NodeCooldownSchema,
  NODE_COOLDOWN_MAX_MS,
} from "./node-state.ts";
export type {
  NodeStatus,
  NodeState,
  NodeObservation,
  NodeObservationBatch,
  NodeCooldown,
} from "./node-state.ts";
export {
  ChatCompletionRequestSchema,
  MessageSchema,
  ACCELERATOR_HINT_PATTERN,
  SESSION_ID_PATTERN,
  CompletionRequestSchema,
  ResponsesRequestSchema,
  EmbeddingRequestSchema,
  INFERENCE_PATHS,
  INFERENCE_PATH_APIS,
  isInferencePath,
} from "./http.ts";
export type {
  ChatCompletionRequest,
  CompletionRequest,
  ResponsesRequest,
  EmbeddingRequest,
  InferencePath,
} from "./http.ts";
export {
  serializeRoutingHeader,
  parseRoutingHeader,
  parseSfDictionary,
  StructuredFieldParseError,
} from "./routing-header.ts";
export type { RoutingInfo } from "./routing-header.ts";
export { AggregatorHeartbeatSchema } from "./aggregator-replica.ts";
export type { AggregatorHeartbeat } from "./aggregator-replica.ts";
export {
  CONFIG_KEY_PATTERN,
  ConfigKeySchema,
  CloudSpotCostSchema,
  OnPremCostSchema,
  CostEntrySchema,
  SPOT_COST_KEY_PREFIX,
  spotCostKey,
  QualityScoreSchema,
  ApprovedMeasurementSchema,
  REVOCATION_MATCH_FIELDS,
  RevocationSchema,
} from "./admin.ts";
export type {
  CloudSpotCost,
  OnPremCost,
  CostEntry,
  QualityScore,
  ApprovedMeasurement,
  Revocation,
} from "./admin.ts";
export { InferRequestSchema, INFER_GENERATION_FIELDS } from "./infer.ts";
export type { InferRequest } from "./infer.ts";
export {
  ATTESTATION_RESULT_PREFIX,
  ATTESTATION_RESULT_ALL,
  ATTESTATION_QUEUE_GROUP,
  ATTESTATION_RESULTS_BUCKET,
  ATTESTATION_NONCE_BYTES,
  ATTESTATION_FAILURES,
  ATTESTATION_VERIFY_ERRORS,
  ATTESTATION_UNUSABLE_REASONS,
  NODE_QUOTE_PATH,
  NODE_SESSION_KEYS_PATH,
  attestationResultSubject,
  isTeeTier,
  revocationMatches,
  findRevocation,
  attestationVerdict,
  isAttestationUsable,
  NonceHexSchema,
  NodeQuoteResponseSchema,
  TeeTierSchema,
  TdMeasurementSchema,
  AttestationCheckSchema,
  AttestationResultSchema,
  AttestationVerifyRequestSchema,
  AttestationVerifyReplySchema,
} from "./attestation.ts";
export type {
  NodeQuoteResponse,
  TeeTier,
  TdMeasurement,
  RevocationSubject,
  AttestationCheck,
  AttestationResult,
  AttestationVerifyRequest,
  AttestationVerifyReply,
  AttestationUnusableReason,
  AttestationVerdict,
} from "./attestation.ts";
export {
  JOB_ID_PATTERN,
  JOB_STREAMS,
  JOB_SUBMIT_PREFIX,
  JOB_RESULT_PREFIX,
  JOB_DEAD_PREFIX,
  jobDeadSubject,
  JOB_STATUS_BUCKET,
  JOB_MESSAGE_TYPE,
  JOB_HEADERS,
  JOB_DEDUPE_WINDOW_MS,
  JOB_OUTCOMES,
  JOB_STATUSES,
  JobStatusSchema,
  jobSubmitSubject,
  accountJobsFilter,
  accountResultsFilter,
  jobResultSubject,
  jobKey,
} from "./batch.ts";
export type { JobStatus, JobOutcome } from "./batch.ts";
export {
  SESSIONS_BUCKET,
  SESSION_CREATE_SUBJECT,
  SESSION_DELETE_SUBJECT,
  SESSION_DEFAULT_TTL_S,
  SESSION_MAX_TTL_S,
  SESSION_KEY_GRACE_S,
  SESSION_CREATE_BUDGET_MS,
  SESSION_KEY_PATTERN,
  SESSION_END_REASONS,
  isSessionId,
  SessionAttestationSchema,
  SessionSchema,
  SessionCreateRequestSchema,
  SessionCreateReplySchema,
  SessionDeleteRequestSchema,
  SessionDeleteReplySchema,
} from "./sessions.ts";
export type {
  Session,
  SessionAttestation,
  SessionEndReason,
  SessionCreateRequest,
  SessionCreateReply,
  SessionDeleteRequest,
  SessionDeleteReply,
} from "./sessions.ts";
export {
  ATTESTATION_VERIFY_ENDPOINT,
  SESSION_CREATE_ENDPOINT,
  SESSION_DELETE_ENDPOINT,
} from "./endpoints.ts";
export type { JsonEndpoint } from "./endpoints.ts";
export {
  CidrListSetting,
  DEFAULT_DENIED_NODE_CIDRS,
  LOOPBACK_NODE_CIDRS,
  METADATA_NODE_CIDRS,
  NODE_ADDRESS_CONFIG_SHAPE,
  NODE_ADDRESS_RULES,
  UNSPECIFIED_NODE_CIDRS,
  createNodeAddressPolicy,
  endpointProblem,
  hostRefusal,
  isLocalhostName,
  nodeAddressPolicyFromEnv,
  nodeAddressPolicyOf,
  parseCidrList,
} from "./node-address.ts";
export type {
  NodeAddressPolicy,
  NodeAddressRefusal,
  NodeAddressRule,
  NodeAddressRules,
} from "./node-address.ts";
export { backoffDelayMs } from "./backoff.ts";
export type { CappedBackoff } from "./backoff.ts";
export {
  SERVICE_IDENTITIES,
  BATCH_IDENTITY_PREFIX,
  batchIdentity,
  inboxPrefixOf,
} from "./identities.ts";
export type { ServiceIdentity } from "./identities.ts";
export { CONFIG_BUCKETS, ALL_KV_BUCKETS } from "./bus-resources.ts";
export {
  DISPATCHER_IN_FLIGHT_PREFIX,
  DISPATCHER_IN_FLIGHT_ALL,
  dispatcherInFlightSubject,
  DISPATCHER_IN_FLIGHT_MAX_NODES,
  DISPATCHER_MAX_REPLICAS,
  DispatcherInFlightSchema,
} from "./dispatcher-in-flight.ts";
export type { DispatcherInFlight } from "./dispatcher-in-flight.ts";
export {
  DISPATCHER_PLACEMENTS_PREFIX,
  DISPATCHER_PLACEMENTS_ALL,
  DISPATCHER_PLACEMENTS_MAX,
  dispatcherPlacementsSubject,
  DispatcherPlacementsSchema,
} from "./dispatcher-placements.ts";
export type { DispatcherPlacements } from "./dispatcher-placements.ts";
export {
  SEALED_VERSION,
  SEALED_REQUEST_MEDIA_TYPE,
  SEALED_RESPONSE_MEDIA_TYPE,
  SEALED_SUITES,
  DEFAULT_SEALED_SUITE,
  SEALED_FINAL_EVENT,
  SEALED_REPLAY_WINDOW,
  SEALED_MAX_CHANNELS_PER_KEY,
  sealedRequestAad,
} from "./sealed.ts";
export type {
  SealedSuite,
  SealedRequestEnvelope,
  SealedResponseEnvelope,
  SealedResponseHead,
  SealedAadFields,
} from "./sealed.ts";
export { SealedRequestSchema } from "./sealed-schema.ts";
export {
  countEvents,
  isDoneEvent,
  MAX_HELD_EVENT_BYTES,
  SseEventCutter,
  lastBoundaryEnd,
  splitEvents,
} from "./sse.ts";
export type { SseEventCutterOptions } from "./sse.ts";
