/**
 * Why a sealed message was refused. `sealed_request_invalid`: the envelope or what it opens to
 * is not what the format says; `sealed_request_rejected`: the ciphertext does not open (altered,
 * or sealed to another key); `sealed_response_invalid`: an answer that does not open, is cut
 * short or is not sealed at all.
 */
export type SealedErrorCode =
  "sealed_request_invalid" | "sealed_request_rejected" | "sealed_response_invalid";

export class SealedChannelError extends Error {
  readonly code: SealedErrorCode;
  /** The envelope field at fault, when there is one. */
  readonly param: string | null;
  constructor(code: SealedErrorCode, message: string, param: string | null = null) {
    super(message);
    this.name = "SealedChannelError";
    this.code = code;
    this.param = param;
  }
}
