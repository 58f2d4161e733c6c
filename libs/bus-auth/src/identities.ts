import { chmod, mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createUser, fromSeed } from "@nats-io/nkeys";
import { permissionsFor } from "./permissions.ts";
import { renderAuthorization } from "./server-config.ts";

/** A bus identity's key pair: the seed stays with the service, the public key goes to nats-server. */
export interface BusIdentity {
  identity: string;
  /** `SU…`: the secret. */
  seed: string;
  /** `U…`. */
  publicKey: string;
}

/** A fresh nkey user for `identity`. */
export function generateIdentity(identity: string): BusIdentity {
  const pair = createUser();
  return {
    identity,
    seed: new TextDecoder().decode(pair.getSeed()),
    publicKey: pair.getPublicKey(),
  };
}

export class InvalidSeedError extends Error {
  readonly code = "invalid_nkey_seed";
  readonly file: string;
  constructor(file: string) {
    super(`${file} does not hold a NATS user nkey seed (SU…)`);
    this.name = "InvalidSeedError";
    this.file = file;
  }
}

/** Reads an identity back from its seed file. */
export async function readIdentity(identity: string, file: string): Promise<BusIdentity> {
  const seed = (await readFile(file, "utf8")).trim();
  try {
    if (!seed.startsWith("SU")) throw new Error("not a user seed");
    return { identity, seed, publicKey: fromSeed(new TextEncoder().encode(seed)).getPublicKey() };
  } catch {
    throw new InvalidSeedError(file);
  }
}

/** The server's authorization block granting each identity its permissions. */
export function authorizationFor(identities: readonly BusIdentity[]): string {
  return renderAuthorization(
    identities.map((i) => ({
      identity: i.identity,
      publicKey: i.publicKey,
      permissions: permissionsFor(i.identity),
    })),
  );
}

const SEED_SUFFIX = ".nk";
/** Where a credentials directory keeps one identity's seed. */
export const seedFileOf = (dir: string, identity: string) => join(dir, `${identity}${SEED_SUFFIX}`);
/** The authorization block nats-server includes, beside the seeds. */
export const AUTH_CONFIG_FILE = "auth.conf";

export interface WriteCredentialsResult {
  identities: BusIdentity[];
  /** Identities whose seed was made now (new or rotated). */
  generated: string[];
  authConfigFile: string;
}

/**
 * Fills a credentials directory: keeps every seed already there, generates the missing
 * ones (and those listed in `rotate`, which get a new key), then rewrites `auth.conf` for
 * the whole set. Seeds are written owner-read-only.
 */
export async function writeCredentials(
  dir: string,
  wanted: readonly string[],
  rotate: readonly string[] = [],
): Promise<WriteCredentialsResult> {
  // An unknown identity fails here, before any file is written.
  for (const name of [...wanted, ...rotate]) permissionsFor(name);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const present = (await readdir(dir))
    .filter((f) => f.endsWith(SEED_SUFFIX))
    .map((f) => f.slice(0, -SEED_SUFFIX.length));
  const names = [...new Set([...present, ...wanted])].sort();
  const identities: BusIdentity[] = [];
  const generated: string[] = [];
  for (const name of names) {
    const file = seedFileOf(dir, name);
    if (present.includes(name) && !rotate.includes(name)) {
      identities.push(await readIdentity(name, file));
      continue;
    }
    const identity = generateIdentity(name);
    await writeFile(file, `${identity.seed}\n`, { mode: 0o600 });
    await chmod(file, 0o600);
    identities.push(identity);
    generated.push(name);
  }
  const authConfigFile = join(dir, AUTH_CONFIG_FILE);
  await writeFile(authConfigFile, authorizationFor(identities), { mode: 0o600 });
  return { identities, generated, authConfigFile };
}
