// The named checks a verification reports, in the order they run.
import { verify, type KeyObject } from "node:crypto";

/** Every check `verifyQuote` can report, in run order. */
export const CHECK_NAMES = [
  "quote_format",
  "qe_vendor",
  "pck_chain",
  "pck_chain_validity",
  "pck_extension",
  "qe_report_signature",
  "qe_report_data",
  "qe_report_identity",
  "quote_signature",
  "collateral_required",
  "collateral_format",
  "root_ca_crl",
  "pck_crl",
  "tcb_info_signature",
  "tcb_info_format",
  "tcb_info_freshness",
  "qe_identity_signature",
  "qe_identity_format",
  "qe_identity_freshness",
  "qe_identity_match",
  "tcb_info_match",
  "tdx_module",
  "tcb_level",
  "tcb_status",
  "td_debug",
  "mrservicetd",
  "measurements",
  "report_data",
] as const;
export type CheckName = (typeof CHECK_NAMES)[number];

/** One verification step: its name, whether it passed, and a sentence saying why. */
export interface Check {
  name: CheckName;
  ok: boolean;
  detail: string;
}

/** Appends checks; the verdict is the conjunction of everything appended. */
export class CheckList {
  readonly checks: Check[] = [];
  add(name: CheckName, ok: boolean, detail: string): boolean {
    this.checks.push({ name, ok, detail });
    return ok;
  }
}

/**
 * ECDSA-SHA256 verification that reports a malformed key or signature as "invalid" rather
 * than throwing; `encoding` is `ieee-p1363` for Intel's raw r‖s, `der` for X.509/CRLs.
 */
export function verifySha256(
  data: Uint8Array,
  key: KeyObject,
  signature: Uint8Array,
  encoding: "der" | "ieee-p1363",
): boolean {
  try {
    return verify("sha256", data, { key, dsaEncoding: encoding }, signature);
  } catch {
    return false;
  }
}
