import type { BusPermissions } from "./permissions.ts";

/** One nkey user of the nats-server authorization block. */
export interface AuthorizedUser {
  /** Identity name, written as a comment beside the key. */
  identity: string;
  /** The user's public nkey (`U…`). */
  publicKey: string;
  permissions: BusPermissions;
}

const quote = (s: string) => JSON.stringify(s);
const list = (items: string[], indent: string) =>
  items.length === 0
    ? "[]"
    : `[\n${items.map((i) => `${indent}  ${quote(i)}`).join(",\n")}\n${indent}]`;

/**
 * The nats-server `authorization` block for these users: every user is an nkey with an
 * allow-list per direction, so anything not listed is refused, and a connection without a
 * known key is refused outright (there is no `no_auth_user`).
 */
export function renderAuthorization(users: readonly AuthorizedUser[]): string {
  if (users.length === 0) throw new Error("an authorization block needs at least one user");
  const entries = users.map((u) => {
    const p = u.permissions;
    const lines = [
      `    # ${u.identity}`,
      "    {",
      `      nkey: ${quote(u.publicKey)}`,
      "      permissions: {",
      `        publish: { allow: ${list(p.publish, "        ")} }`,
      `        subscribe: { allow: ${list(p.subscribe, "        ")} }`,
    ];
    if (p.allowResponses) lines.push(`        allow_responses: { max: 1, expires: "1m" }`);
    lines.push("      }", "    }");
    return lines.join("\n");
  });
  return ["authorization {", "  users: [", entries.join("\n"), "  ]", "}", ""].join("\n");
}

export interface TlsFiles {
  certFile: string;
  keyFile: string;
  /** CA that signs the clients' certificates; with it, mutual TLS on routes. */
  caFile: string;
}

/** Client TLS: every client connection is encrypted; clients verify the server by the CA. */
export function renderClientTls(files: TlsFiles): string {
  return [
    "tls {",
    `  cert_file: ${quote(files.certFile)}`,
    `  key_file: ${quote(files.keyFile)}`,
    `  ca_file: ${quote(files.caFile)}`,
    "  timeout: 5",
    "}",
    "",
  ].join("\n");
}

/**
 * A cluster block with mutual TLS on routes: a route is accepted only from a peer that shows
 * a certificate from the same CA.
 */
export function renderClusterTls(options: {
  name: string;
  host: string;
  port: number;
  routes: string[];
  tls: TlsFiles;
}): string {
  return [
    "cluster {",
    `  name: ${quote(options.name)}`,
    `  host: ${quote(options.host)}`,
    `  port: ${options.port}`,
    `  routes: ${list(options.routes, "  ")}`,
    "  tls {",
    `    cert_file: ${quote(options.tls.certFile)}`,
    `    key_file: ${quote(options.tls.keyFile)}`,
    `    ca_file: ${quote(options.tls.caFile)}`,
    "    verify: true",
    "    timeout: 5",
    "  }",
    "}",
    "",
  ].join("\n");
}
