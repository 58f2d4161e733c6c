// The JSON request-reply subjects of the bus, each with its request and reply schema, so a
// client (`requestJson`) and a server (`serveJson`) are typed from the same contract.
import type { z } from "zod";
import {
  AttestationVerifyReplySchema,
  AttestationVerifyRequestSchema,
  ATTESTATION_QUEUE_GROUP,
} from "./attestation.ts";
import {
  SESSION_CREATE_SUBJECT,
  SESSION_DELETE_SUBJECT,
  SessionCreateReplySchema,
  SessionCreateRequestSchema,
  SessionDeleteReplySchema,
  SessionDeleteRequestSchema,
} from "./sessions.ts";
import { ATTESTATION_VERIFY_SUBJECT, DISPATCHER_QUEUE_GROUP } from "./subjects.ts";

/**
 * One request-reply subject. Every reply schema is a union of answers that share
 * `type: replyType`, one of which is `{ type: replyType, error }`: a server answers bad input
 * (and its own failures, where the schema allows the code) with that error form.
 */
export interface JsonEndpoint<Req extends z.ZodType, Rep extends z.ZodType> {
  readonly subject: string;
  /** The queue group whose members share the subject's requests. */
  readonly queue: string;
  readonly request: Req;
  readonly reply: Rep;
  readonly replyType: string;
}

/** An endpoint on `subject` served by the members of `queue`. */
function endpoint<Req extends z.ZodType, Rep extends z.ZodType>(
  subject: string,
  queue: string,
  request: Req,
  reply: Rep,
  replyType: string,
): JsonEndpoint<Req, Rep> {
  return Object.freeze({ subject, queue, request, reply, replyType });
}

export const ATTESTATION_VERIFY_ENDPOINT = endpoint(
  ATTESTATION_VERIFY_SUBJECT,
  ATTESTATION_QUEUE_GROUP,
  AttestationVerifyRequestSchema,
  AttestationVerifyReplySchema,
  "attestation.verify.reply.v1",
);
export const SESSION_CREATE_ENDPOINT = endpoint(
  SESSION_CREATE_SUBJECT,
  DISPATCHER_QUEUE_GROUP,
  SessionCreateRequestSchema,
  SessionCreateReplySchema,
  "session.create.reply.v1",
);
export const SESSION_DELETE_ENDPOINT = endpoint(
  SESSION_DELETE_SUBJECT,
  DISPATCHER_QUEUE_GROUP,
  SessionDeleteRequestSchema,
  SessionDeleteReplySchema,
  "session.delete.reply.v1",
);
