export { SealedChannelError } from "./errors.ts";
export type { SealedErrorCode } from "./errors.ts";
export { createSessionKeyPair, keyIdOf, sessionPublicKeyOf } from "./session-key.ts";
export type { SessionKeyPair, SessionPublicKey } from "./session-key.ts";
export { openSealedRequest, sealRequest } from "./request.ts";
export type { OpenedRequest, SealRequestInput, SealedRequest } from "./request.ts";
export { ResponseOpener, SealedStreamReader } from "./response-opener.ts";
export type { OpenedAnswer, StreamPart } from "./response-opener.ts";
export { ResponseSealer } from "./response-sealer.ts";
