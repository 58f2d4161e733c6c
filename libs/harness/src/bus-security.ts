import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  createLocalCa,
  generateIdentity,
  permissionsFor,
  renderAuthorization,
  renderClientTls,
} from "@zml/bus-auth";
import type { AuthorizedUser, BusIdentity, BusPermissions } from "@zml/bus-auth";
import { SERVICE_IDENTITIES, batchIdentity, inboxPrefixOf } from "@zml/contracts";

/**
 * The test driver's identity: allowed everything, so tests can seed buckets and watch any
 * subject. It exists only on harness servers; `zml bus-credentials` never makes it.
 */
export const HARNESS_IDENTITY = "harness";

/** What a client needs to connect as one identity (spread into `connectBus`). */
export interface NatsClientOptions {
  servers: string;
  nkeySeedFile?: string;
  caFile?: string;
  inboxPrefix?: string;
}

/** Identities, their seed files, the authorization and TLS blocks of one harness server. */
export interface BusSecurity {
  /** nats-server config blocks: authorization, then client TLS. */
  blocks: string[];
  caFile: string;
  seedFiles: ReadonlyMap<string, string>;
}

/**
 * Generates a key for every service identity, each `batch-<account>`, each of `extra` (a
 * harness-only identity with the permissions given, e.g. the benchmark's floor) and the
 * harness's own, their authorization block, and a local CA with a certificate for 127.0.0.1.
 */
export async function createBusSecurity(
  dir: string,
  batchAccounts: readonly string[],
  extra: Readonly<Record<string, BusPermissions>> = {},
): Promise<BusSecurity> {
  const ca = await createLocalCa(join(dir, "tls"), { hosts: ["127.0.0.1", "localhost"] });
  const names = [...SERVICE_IDENTITIES, ...batchAccounts.map(batchIdentity)];
  const users: AuthorizedUser[] = [];
  const seedFiles = new Map<string, string>();
  const add = async (identity: BusIdentity, permissions: AuthorizedUser["permissions"]) => {
    const file = join(dir, `${identity.identity}.nk`);
    await writeFile(file, `${identity.seed}\n`, { mode: 0o600 });
    seedFiles.set(identity.identity, file);
    users.push({ identity: identity.identity, publicKey: identity.publicKey, permissions });
  };
  for (const name of names) await add(generateIdentity(name), permissionsFor(name));
  for (const [name, permissions] of Object.entries(extra)) {
    await add(generateIdentity(name), permissions);
  }
  await add(generateIdentity(HARNESS_IDENTITY), {
    publish: [">"],
    subscribe: [">"],
    allowResponses: false,
  });
  return {
    blocks: [renderAuthorization(users), renderClientTls(ca)],
    caFile: ca.caFile,
    seedFiles,
  };
}

export class UnknownHarnessIdentityError extends Error {
  readonly code = "unknown_identity";
  constructor(identity: string) {
    super(`this NATS server has no identity '${identity}'`);
    this.name = "UnknownHarnessIdentityError";
  }
}

/** Connection options for `identity` on a server secured with `security`. */
export function clientOptionsFor(
  url: string,
  security: BusSecurity | undefined,
  identity: string,
): NatsClientOptions {
  if (!security) return { servers: url };
  const nkeySeedFile = security.seedFiles.get(identity);
  if (!nkeySeedFile) throw new UnknownHarnessIdentityError(identity);
  return {
    servers: url,
    nkeySeedFile,
    caFile: security.caFile,
    ...(identity === HARNESS_IDENTITY ? {} : { inboxPrefix: inboxPrefixOf(identity) }),
  };
}

/** A service process's bus environment when it runs as `identity`. */
export function serviceEnvFor(options: NatsClientOptions): Record<string, string> {
  if (!options.nkeySeedFile) return { NATS_URL: options.servers, NATS_INSECURE: "1" };
  return {
    NATS_URL: options.servers,
    NATS_NKEY_SEED_FILE: options.nkeySeedFile,
    ...(options.caFile ? { NATS_CA_FILE: options.caFile } : {}),
  };
}
