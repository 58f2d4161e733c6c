export { SealedChannelError } from "./errors.ts";
export type { SealedErrorCode } from "./errors.ts";
export { createSessionKeyPair, keyIdOf, sessionPublicKeyOf } from "./session-key.ts";
export type { SessionKeyPair, SessionPublicKey } from "./session-key.ts";
export { RecipientChannel, SealedChannel } from "./channel.ts";
export type { OpenChannelInput, OpenedRequest, SealInput, SealedRequest } from "./channel.ts";
export { ResponseOpener, SealedStreamReader } from "./response-opener.ts";
export type { OpenedAnswer, StreamPart } from "./response-opener.ts";
export { ResponseSealer } from "./response-sealer.ts";
