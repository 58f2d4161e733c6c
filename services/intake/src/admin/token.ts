/** Shortest admin token accepted outside dev: 24 characters (e.g. `openssl rand -hex 24` gives 48). */
export const ADMIN_TOKEN_MIN_LENGTH = 24;
const MIN_DISTINCT_CHARACTERS = 8;
/** Placeholders and published defaults people paste in; any of them makes a token guessable. */
const KNOWN_DEFAULTS = [
  "changeme",
  "change-me",
  "change_me",
  "password",
  "passw0rd",
  "secret",
  "example",
  "default",
  "letmein",
  "admin-token",
  "zml-demo-key",
  "0123456789",
  "abcdefgh",
  "qwerty",
];

/**
 * Why an admin token is too weak for anything but a dev stack, or undefined when it is
 * acceptable: too short, too few distinct characters (`aaaa…`, `abab…`), or containing a
 * known default. Pure: the config check and its tests call it.
 */
export function adminTokenWeakness(token: string): string | undefined {
  if (token.length < ADMIN_TOKEN_MIN_LENGTH) {
    return `shorter than ${ADMIN_TOKEN_MIN_LENGTH} characters`;
  }
  if (new Set(token).size < MIN_DISTINCT_CHARACTERS) {
    return `fewer than ${MIN_DISTINCT_CHARACTERS} distinct characters`;
  }
  const lower = token.toLowerCase();
  const known = KNOWN_DEFAULTS.find((d) => lower.includes(d));
  if (known !== undefined) return `contains the well-known default "${known}"`;
  return undefined;
}
