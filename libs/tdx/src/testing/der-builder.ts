// DER building blocks for synthetic certificates and CRLs (asn1js; node:crypto signs).
import * as asn1js from "asn1js";
import { createPublicKey, sign, type KeyObject } from "node:crypto";

export const seq = (...value: asn1js.AsnType[]): asn1js.Sequence => new asn1js.Sequence({ value });
export const oid = (value: string): asn1js.ObjectIdentifier =>
  new asn1js.ObjectIdentifier({ value });
export const int = (value: number): asn1js.Integer => new asn1js.Integer({ value });
export const octets = (bytes: Uint8Array): asn1js.OctetString =>
  new asn1js.OctetString({ valueHex: bytes });

/** A positive INTEGER from big-endian bytes (a 0x00 is prepended when the top bit is set). */
export function bigInt(bytes: Uint8Array): asn1js.Integer {
  const positive = (bytes[0] ?? 0) & 0x80 ? Uint8Array.of(0, ...bytes) : bytes;
  return new asn1js.Integer({ valueHex: positive });
}

export function explicit(tagNumber: number, inner: asn1js.AsnType): asn1js.Constructed {
  return new asn1js.Constructed({ idBlock: { tagClass: 3, tagNumber }, value: [inner] });
}

/** Name with a CN and an O, the only attributes our verifier reads. */
export function name(cn: string, org: string): asn1js.Sequence {
  const rdn = (type: string, value: string): asn1js.Set =>
    new asn1js.Set({ value: [seq(oid(type), new asn1js.Utf8String({ value }))] });
  return seq(rdn("2.5.4.3", cn), rdn("2.5.4.10", org));
}

/** UTCTime before 2050, GeneralizedTime from then on (RFC 5280 §4.1.2.5). */
export function time(date: Date): asn1js.AsnType {
  return date.getUTCFullYear() < 2050
    ? new asn1js.UTCTime({ valueDate: date })
    : new asn1js.GeneralizedTime({ valueDate: date });
}

export const ECDSA_SHA256 = (): asn1js.Sequence => seq(oid("1.2.840.10045.4.3.2"));

export function der(node: asn1js.AsnType): Uint8Array {
  return new Uint8Array(node.toBER());
}

/** `SEQUENCE { tbs, ecdsa-with-SHA256, BIT STRING signature }`, as certificates and CRLs are. */
export function signed(tbs: asn1js.Sequence, key: KeyObject): Uint8Array {
  const signature = sign("sha256", der(tbs), key);
  return der(seq(tbs, ECDSA_SHA256(), new asn1js.BitString({ valueHex: signature })));
}

export function toPem(label: string, bytes: Uint8Array): string {
  const body = Buffer.from(bytes).toString("base64").replace(/.{64}/g, "$&\n");
  return `-----BEGIN ${label}-----\n${body.replace(/\n$/, "")}\n-----END ${label}-----\n`;
}

/** The DER SubjectPublicKeyInfo of a key, as an asn1js node to embed. */
export function spki(key: KeyObject): asn1js.AsnType {
  const bytes = createPublicKey(key).export({ type: "spki", format: "der" });
  return asn1js.fromBER(new Uint8Array(bytes)).result;
}
