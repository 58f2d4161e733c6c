export { permissionsFor, UnknownIdentityError } from "./permissions.ts";
export type { BusPermissions } from "./permissions.ts";
export { renderAuthorization, renderClientTls, renderClusterTls } from "./server-config.ts";
export type { AuthorizedUser, TlsFiles } from "./server-config.ts";
export {
  generateIdentity,
  readIdentity,
  authorizationFor,
  writeCredentials,
  seedFileOf,
  AUTH_CONFIG_FILE,
  InvalidSeedError,
} from "./identities.ts";
export type { BusIdentity, WriteCredentialsResult } from "./identities.ts";
export { createLocalCa } from "./tls.ts";
export type { LocalCa } from "./tls.ts";
