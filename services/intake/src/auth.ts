import { createHash, timingSafeEqual } from "node:crypto";
import { ZmlError } from "@zml/contracts";
import type { AccountSpec } from "@zml/contracts";

/** Resolves a bearer API key to its account. */
export interface Authenticator {
  /** Rebuilds the key index; call whenever the accounts change. */
  reindex(accounts: Iterable<AccountSpec>): void;
  authenticate(authorization: string | undefined): AccountSpec;
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
export function createAuthenticator(): Authenticator {
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
    authenticate(authorization) {
      const digest = createHash("sha256").update(bearerToken(authorization)).digest();
      const entry = byHash.get(digest.toString("hex"));
      if (!entry || !timingSafeEqual(entry.hash, digest)) {
        throw new ZmlError("unauthorized", "invalid API key", "authorization");
      }
      return entry.account;
    },
  };
}

function bearerToken(authorization: string | undefined): string {
  if (!authorization) {
    throw new ZmlError(
      "unauthorized",
      "missing API key: send 'Authorization: Bearer <key>'",
      "authorization",
    );
  }
  const match = /^Bearer +([\x21-\x7e]{1,512}) *$/i.exec(authorization);
  if (!match) {
    throw new ZmlError(
      "unauthorized",
      "malformed Authorization header; expected 'Bearer <key>'",
      "authorization",
    );
  }
  return match[1]!;
}
