export {
  ROUTE_REQUEST_SUBJECT,
  ROUTE_CANCEL_SUBJECT,
  DISPATCHER_QUEUE_GROUP,
  NODE_STATE_PREFIX,
  NODE_STATE_ALL,
  NODE_OBSERVATION_PREFIX,
  NODE_OBSERVATION_ALL,
  REVOCATION_SUBJECT,
  ATTESTATION_VERIFY_SUBJECT,
  KV_BUCKETS,
  STREAMS,
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
  ROUTING_HTTP_HEADER,
  MESSAGE_TYPES,
} from "./headers.ts";
export type { ReplyKind } from "./headers.ts";
export {
  ERROR_CODES,
  ErrorCodeSchema,
  ErrorBodySchema,
  ZmlError,
  openAiErrorType,
  toOpenAiError,
} from "./errors.ts";
export type { ErrorCode, ErrorBody } from "./errors.ts";
export {
  TierSchema,
  FRAMEWORKS,
  FrameworkSchema,
  COST_PRIORITIES,
  CostPrioritySchema,
  NodeSpecSchema,
  MODEL_ID_PATTERN,
  ModelSpecSchema,
  PolicySpecSchema,
  AccountSpecSchema,
  FleetDocumentSchema,
} from "./fleet.ts";
export type {
  Tier,
  Framework,
  CostPriority,
  NodeSpec,
  ModelSpec,
  PolicySpec,
  AccountSpec,
  FleetDocument,
} from "./fleet.ts";
export {
  NODE_STATUSES,
  NodeStatusSchema,
  NodeStateSchema,
  OBSERVATION_OUTCOMES,
  NodeObservationSchema,
} from "./node-state.ts";
export type { NodeStatus, NodeState, NodeObservation } from "./node-state.ts";
export {
  ChatCompletionRequestSchema,
  CompletionRequestSchema,
  INFERENCE_PATHS,
  isInferencePath,
} from "./http.ts";
export type { ChatCompletionRequest, CompletionRequest, InferencePath } from "./http.ts";
export {
  serializeRoutingHeader,
  parseRoutingHeader,
  parseSfDictionary,
  StructuredFieldParseError,
} from "./routing-header.ts";
export type { RoutingInfo } from "./routing-header.ts";
