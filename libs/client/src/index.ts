export { createClient } from "./client.ts";
export type {
  ClientOptions,
  CallOptions,
  ZmlClient,
  JobsApi,
  JobOptions,
  JobReceipt,
  JobView,
} from "./client.ts";
export { ZmlApiError, ZmlConnectionError } from "./errors.ts";
export { verifyNodeAttestation, fetchTlsKeySha256 } from "./attestation.ts";
export type {
  NodeAttestation,
  VerifyAttestationOptions,
  AttestationCheckResult,
} from "./attestation.ts";
export { parseSse } from "./sse.ts";
export type { SseEvent } from "./sse.ts";
export type {
  ChatCompletion,
  ChatCompletionChunk,
  InferResponse,
  InferStream,
  AnswerMeta,
  ModelInfo,
} from "./types.ts";
export type { RoutingInfo, InferRequest, ChatCompletionRequest } from "@zml/contracts";
