import { NODE_ID_PATTERN } from "./subjects.ts";

/**
 * Bus identities. Every connection to NATS authenticates as one of these (an nkey user),
 * and nats-server grants it only what that job needs (see `@zml/bus-auth`).
 */
export const SERVICE_IDENTITIES = [
  "intake",
  "dispatcher",
  "health-aggregator",
  "attestation",
  /** The `zml` CLI and the intake admin API: the only writers of configuration. */
  "admin",
] as const;
export type ServiceIdentity = (typeof SERVICE_IDENTITIES)[number];

/** Identities of batch producers are `batch-<account>`: they may queue jobs for that account. */
export const BATCH_IDENTITY_PREFIX = "batch-";

export function batchIdentity(account: string): string {
  if (!NODE_ID_PATTERN.test(account)) throw new Error(`invalid account id: ${account}`);
  return `${BATCH_IDENTITY_PREFIX}${account}`;
}

/**
 * Each identity's private inbox prefix: request replies, JetStream acks and KV watch
 * deliveries arrive under `<prefix>.>`, which only that identity may subscribe to.
 */
export function inboxPrefixOf(identity: string): string {
  return `_INBOX_${identity}`;
}
