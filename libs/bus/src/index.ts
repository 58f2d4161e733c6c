export { connectBus, natsConnectionOf, OpenBusError } from "./connection.ts";
export { BUS_CONFIG_SHAPE, requireBusIdentity, busOptionsOf } from "./bus-config.ts";
export type { Bus, BusLogger, ConnectBusOptions, ConnectionListener } from "./connection.ts";
export { injectTraceContext, extractTraceContext } from "./trace-context.ts";
export { encodeJson, decodeJson, MessageValidationError } from "./json-codec.ts";
export { publishJson, subscribeJson, publishBytes, subscribeMessages } from "./typed.ts";
export type { SubscribeJsonOptions } from "./typed.ts";
export { requestJson, serveJson } from "./request-reply.ts";
export type { RequestJsonOptions, ServeJsonOptions } from "./request-reply.ts";
export {
  openKv,
  openOwnedKv,
  readKvLatest,
  watchKvIntoMap,
  watchBucket,
  KvLoadTimeoutError,
} from "./kv-map.ts";
export {
  replicasFor,
  ensureStream,
  ReplicaUpdateError,
  MAX_REPLICAS,
  CLUSTER_DEFAULT_REPLICAS,
} from "./replicas.ts";
export { ensureBusResources } from "./bus-resources.ts";
export type { KvLatest, KvMap, KvMapOptions } from "./kv-map.ts";
export {
  ensureJobStreams,
  publishToStream,
  lastStreamMessage,
  openPullConsumer,
  consumerBacklog,
  confirmAck,
  isRetryableBusError,
} from "./job-streams.ts";
export type {
  StreamPublishOptions,
  StreamPublishResult,
  StoredMessage,
  PullConsumer,
  PullConsumerOptions,
  JobMessage,
} from "./job-streams.ts";
export {
  createAcceptAnnouncer,
  createReplyWriter,
  createReplyMux,
  errorOfFrame,
  publishInRouteOrder,
} from "./route-reply.ts";
export type {
  RouteFrame,
  AnswerMeta,
  ReplyWriter,
  ReplyWriterOptions,
  BusReplyWriter,
  AcceptAnnouncer,
  ReplyMux,
  PendingReply,
  MuxRequestOptions,
  ReplyMuxOptions,
} from "./route-reply.ts";
export { createHeaders, headerOf } from "./fast-headers.ts";
export { decodeFrameBatch } from "./frame-batch.ts";
export type { DecodedBatch, IncomingFrame } from "./frame-batch.ts";
export type { MsgHdrs, Msg, NatsConnection, Subscription } from "@nats-io/nats-core";
export type { KV } from "@nats-io/kv";
