import { canonicalMIMEHeaderKey, Match, MsgHdrsImpl } from "@nats-io/nats-core";
import type { MsgHdrs } from "@nats-io/nats-core";

/*
 * NATS headers with constant-time exact-name access. The client's own implementation lists
 * and filters every key on each get, set and has (a set does it twice), so building the dozen
 * routing headers of one `route.request`, or reading them back, is quadratic and allocates an
 * array per call. Exact-name access is a Map lookup: the same answer, since an exact match is
 * the client's default and it stores each name as given. Other match modes, encoding and
 * everything else are the client's.
 */

/** Names already checked once: a valid header name stays valid. */
const validNames = new Set<string>();
const INVALID_VALUE = /[\r\n]/;

function checkName(name: string): void {
  if (validNames.has(name)) return;
  canonicalMIMEHeaderKey(name); // throws on characters a header name may not hold
  if (validNames.size < 1_000) validNames.add(name);
}

function checkValue(value: string): string {
  // The client's own check, with its message.
  return INVALID_VALUE.test(value) ? MsgHdrsImpl.validHeaderValue(value) : value.trim();
}

class FastHeaders extends MsgHdrsImpl {
  // The client's declaration narrows get's match to "exact"; its code takes any Match.
  override get(k: string, match: Match = Match.Exact): string {
    if (match !== Match.Exact) return (super.get as (k: string, m: Match) => string)(k, match);
    return this.headers.get(k)?.[0] ?? "";
  }

  override has(k: string, match: Match = Match.Exact): boolean {
    if (match !== Match.Exact) return super.has(k, match);
    return this.headers.has(k);
  }

  override set(k: string, v: string, match: Match = Match.Exact): void {
    if (match !== Match.Exact) return super.set(k, v, match);
    checkName(k);
    this.headers.set(k, [checkValue(v)]);
  }

  override append(k: string, v: string, match: Match = Match.Exact): void {
    if (match !== Match.Exact) return super.append(k, v, match);
    checkName(k);
    const value = checkValue(v);
    const values = this.headers.get(k);
    if (values) values.push(value);
    else this.headers.set(k, [value]);
  }

  override delete(k: string, match: Match = Match.Exact): void {
    if (match !== Match.Exact) return super.delete(k, match);
    this.headers.delete(k);
  }
}

/** Empty NATS headers for a message to publish (see above). */
export function createHeaders(): MsgHdrs {
  return new FastHeaders();
}

/**
 * One header of a received message by its exact name, "" when absent: a Map lookup on the
 * client's decoded headers instead of its list-and-filter `get`.
 */
export function headerOf(h: MsgHdrs | undefined, name: string): string {
  if (h === undefined) return "";
  if (h instanceof MsgHdrsImpl) return h.headers.get(name)?.[0] ?? "";
  return h.get(name);
}
