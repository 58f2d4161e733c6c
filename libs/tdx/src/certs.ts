// Certificate chains to the pinned Intel SGX Root CA, with node:crypto doing every signature check.
import { X509Certificate } from "node:crypto";

/** A chain that verified structurally, leaf first, ending in the pinned root. */
export interface VerifiedChain {
  certs: X509Certificate[];
}

/** Parses one PEM certificate; undefined when it is not one. */
export function loadCertificate(pem: string): X509Certificate | undefined {
  try {
    return new X509Certificate(pem);
  } catch {
    return undefined;
  }
}

/** The CN of a node:crypto subject/issuer string ("CN=…\nO=…"). */
export function commonName(dn: string): string | undefined {
  for (const line of dn.split("\n")) if (line.startsWith("CN=")) return line.slice(3);
  return undefined;
}

/**
 * Checks a chain given leaf first: exactly `names.length` certificates, certificate i has
 * one of `names[i]` as CN, the last one is byte-identical to `root`, each is signed by the
 * next, only the leaf is not a CA, all keys are P-256. Validity dates are checked apart
 * (see {@link validityProblem}) so a caller can report them as their own check.
 * Returns the chain, or a sentence saying what is wrong.
 */
export function verifyChain(
  pems: string[],
  root: X509Certificate,
  names: readonly (readonly string[])[],
): VerifiedChain | string {
  if (pems.length !== names.length) {
    return `expected ${names.length} certificates, found ${pems.length}`;
  }
  const certs: X509Certificate[] = [];
  for (const [i, pem] of pems.entries()) {
    const cert = loadCertificate(pem);
    if (!cert) return `certificate ${i + 1} does not parse`;
    certs.push(cert);
  }
  const last = certs[certs.length - 1];
  if (!last || !last.raw.equals(root.raw)) return "root certificate is not the pinned root";
  if (!last.verify(last.publicKey)) return "root self-signature is invalid";
  for (const [i, cert] of certs.entries()) {
    const cn = commonName(cert.subject) ?? "(no CN)";
    if (!names[i]?.includes(cn))
      return `certificate ${i + 1} is "${cn}", expected ${names[i]?.join(" or ")}`;
    if (cert.publicKey.asymmetricKeyDetails?.namedCurve !== "prime256v1") {
      return `${cn}: key is not P-256`;
    }
    if (cert.ca !== i > 0) return `${cn}: CA flag is ${cert.ca}, expected ${i > 0}`;
    const issuer = certs[i + 1];
    if (issuer && !(cert.checkIssued(issuer) && cert.verify(issuer.publicKey))) {
      return `${cn}: not signed by ${commonName(issuer.subject) ?? "its issuer"}`;
    }
  }
  return { certs };
}

/** A sentence naming the first certificate not valid at `at` (bounds inclusive), or undefined. */
export function validityProblem(certs: X509Certificate[], at: Date): string | undefined {
  for (const cert of certs) {
    const name = commonName(cert.subject) ?? cert.serialNumber;
    if (at < cert.validFromDate) return `${name} not valid before ${iso(cert.validFromDate)}`;
    if (at > cert.validToDate) return `${name} expired at ${iso(cert.validToDate)}`;
  }
  return undefined;
}

/** ISO-8601 without milliseconds, as Intel's collateral writes times. */
export function iso(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, "Z");
}
