export { createClient } from "./client.ts";
export type { ClientOptions, ZmlClient } from "./client.ts";
export type { CallOptions, FetchLike } from "./transport.ts";
export type { JobsApi, JobOptions, JobReceipt, JobView } from "./jobs.ts";
export type { SessionsApi, SessionOptions } from "./sessions.ts";
export { ZmlAttestationError } from "./confidential.ts";
export type {
  ConfidentialSession,
  SessionTrust,
  SessionChatRequest,
  OpenedAnswer,
  OpenedStream,
} from "./confidential.ts";
export { ZmlApiError, ZmlConnectionError } from "./errors.ts";
export { verifyNodeAttestation, fetchTlsKeySha256 } from "./attestation.ts";
export type {
  NodeAttestation,
  VerifyAttestationOptions,
  AttestationCheckResult,
  AttestationCheck,
  Collateral,
  MeasurementField,
  MeasurementSet,
} from "./attestation.ts";
export { parseRoutingHeader, RoutingHeaderError, ROUTING_HEADER } from "./routing.ts";
export type { RoutingInfo } from "./routing.ts";
export { parseSse } from "./sse.ts";
export type { SseEvent } from "./sse.ts";
export type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionRequest,
  ChatMessage,
  InferRequest,
  InferResponse,
  InferStream,
  AnswerMeta,
  ModelInfo,
  RoutingFields,
  Session,
} from "./types.ts";
