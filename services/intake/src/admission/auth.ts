import { hash, timingSafeEqual } from "node:crypto";
import { ZmlError } from "@zml/contracts";
import type { AccountSpec } from "@zml/contracts";
import type { KeyStoreStatus } from "./key-store.ts";

/** Resolves a bearer API key to its account. */
export interface Authenticator {
  /** Rebuilds the key index; call whenever the accounts change. */
  reindex(accounts: Iterable<AccountSpec>): void;
  /**
   * Returns the key's account. Throws ZmlError `unauthorized` (401) for a missing, malformed
   * or unknown key, and `key_store_unavailable` (503) when the key store cannot be trusted.
   */
  authenticate(authorization: string | undefined, now: number): AccountSpec;
}

interface KeyEntry {
  hash: Buffer;
  account: AccountSpec;
}

/**
 * Keys are stored only as SHA-256 hashes. A presented key is hashed, looked up by its hash,
 * and the stored hash is then compared in constant time, so neither the lookup nor the
 * comparison leaks how much of a guessed key was right.
 */
export function createAuthenticator(keyStore: KeyStoreStatus): Authenticator {
  let byHash = new Map<string, KeyEntry>();
  return {
    reindex(accounts) {
      const next = new Map<string, KeyEntry>();
      for (const account of accounts) {
        for (const hex of account.api_key_sha256) {
          next.set(hex, { hash: Buffer.from(hex, "hex"), account });
        }
      }
      byHash = next;
    },
    authenticate(authorization, now) {
      const digest = sha256(bearerToken(authorization));
      if (!keyStore.available(now)) {
        throw new ZmlError(
          "key_store_unavailable",
          "API keys cannot be checked right now; retry shortly",
          { retryAfterS: 1 },
        );
      }
      const entry = byHash.get(digest.toString("hex"));
      if (!entry || !timingSafeEqual(entry.hash, digest)) {
        throw new ZmlError("unauthorized", "invalid API key", { param: "authorization" });
      }
      return entry.account;
    },
  };
}

/**
 * Checks the admin credential: `Authorization: Bearer <ZML_ADMIN_TOKEN>`, compared as
 * SHA-256 digests in constant time. Throws ZmlError `unauthorized`.
 */
export function createAdminAuthenticator(
  token: string,
): (authorization: string | undefined) => void {
  const expected = sha256(token);
  return (authorization) => {
    if (!timingSafeEqual(sha256(bearerToken(authorization)), expected)) {
      throw new ZmlError("unauthorized", "invalid admin token", { param: "authorization" });
    }
  };
}

function sha256(value: string): Buffer {
  // One-shot: no Hash object per request.
  return hash("sha256", value, "buffer");
}

function bearerToken(authorization: string | undefined): string {
  if (!authorization) {
    throw new ZmlError("unauthorized", "missing API key: send 'Authorization: Bearer <key>'", {
      param: "authorization",
    });
  }
  const match = /^Bearer +([\x21-\x7e]{1,512}) *$/i.exec(authorization);
  if (!match) {
    throw new ZmlError("unauthorized", "malformed Authorization header; expected 'Bearer <key>'", {
      param: "authorization",
    });
  }
  return match[1]!;
}
