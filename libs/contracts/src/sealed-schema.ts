import { z } from "zod";
import { MODEL_ID_PATTERN } from "./fleet.ts";
import { SEALED_MAX_SEQ, SEALED_SUITES, SEALED_VERSION } from "./sealed.ts";
import type { SealedRequestEnvelope } from "./sealed.ts";
import { SESSION_KEY_PATTERN } from "./sessions.ts";

const BASE64URL = /^[A-Za-z0-9_-]+$/;
/** base64url without padding of 32 bytes: the channel's `enc`. */
const ENC_LENGTH = 43;
/** The AEAD tag alone (16 bytes) is 22 characters: a ciphertext is at least that. */
const MIN_CIPHERTEXT_LENGTH = 22;

/**
 * A sealed request body (`docs/sealed-channel.md`). Strict: an unknown field is an error, so a
 * client cannot leave a prompt in clear beside the ciphertext by mistake. Intake validates
 * this and nothing inside; the TD proxy validates it again before it opens anything.
 */
export const SealedRequestSchema = z.strictObject({
  // A request of another version (1: an HPKE setup per request) is refused by name: this
  // gateway and its TDs speak one version, and the message says which.
  zml_sealed: z.literal(SEALED_VERSION, {
    error: `version ${SEALED_VERSION} of the sealed format is served (docs/sealed-channel.md)`,
  }),
  model: z.string().regex(MODEL_ID_PATTERN, "a model id"),
  session_id: z.string().regex(SESSION_KEY_PATTERN, "a session id: ses- and 32 hex"),
  tier: z.literal(4).optional(),
  policy: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[^\r\n]+$/)
    .optional(),
  stream: z.boolean(),
  max_tokens: z.number().int().positive().optional(),
  suite: z.enum(SEALED_SUITES),
  key_id: z.string().regex(/^[0-9a-f]{64}$/, "64 lowercase hex: SHA-256 of the session key"),
  seq: z.number().int().min(0).max(SEALED_MAX_SEQ),
  enc: z.string().length(ENC_LENGTH).regex(BASE64URL, "base64url without padding"),
  ciphertext: z.string().min(MIN_CIPHERTEXT_LENGTH).regex(BASE64URL, "base64url without padding"),
}) satisfies z.ZodType<SealedRequestEnvelope>;
