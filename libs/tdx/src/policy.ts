// Our own acceptance rules on top of Intel's: debug, approved measurements, REPORTDATA binding.
import { timingSafeEqual } from "node:crypto";
import { isHex } from "./bytes.ts";
import { TCB_STATUSES, type TcbStatus } from "./collateral.ts";
import type { TdReportBody } from "./quote.ts";

/** Measurement fields a set may pin, with their sizes in bytes. */
export const MEASUREMENT_FIELDS = {
  mrtd: 48,
  rtmr0: 48,
  rtmr1: 48,
  rtmr2: 48,
  rtmr3: 48,
  mrconfigid: 48,
  mrowner: 48,
  mrownerconfig: 48,
  mrseam: 48,
  xfam: 8,
  td_attributes: 8,
} as const;
export type MeasurementField = keyof typeof MEASUREMENT_FIELDS;

/**
 * One approved set of measurements (hex, any case). `mrtd` is required; every other field
 * given must match too, fields left out are not compared.
 */
export type MeasurementSet = { id?: string; mrtd: string } & Partial<
  Record<Exclude<MeasurementField, "mrtd">, string>
>;

/** What a verified quote must also satisfy. */
export interface VerificationPolicy {
  /** TCB statuses accepted (default `["UpToDate"]`). `Revoked` is never accepted. */
  acceptableTcbStatuses?: readonly TcbStatus[];
  /** Accept debug TDs (TD_ATTRIBUTES bit 0). Default false: never in production. */
  allowDebug?: boolean;
  /**
   * Approved measurement sets; the quote passes when any one set matches on all its given
   * fields. Undefined skips the check; an empty list approves nothing.
   */
  approvedMeasurements?: readonly MeasurementSet[];
  /** Exact expected REPORTDATA (64 bytes of hex), compared in constant time. */
  expectedReportData?: string;
  /**
   * Fail when no collateral is given (default false: without collateral only signatures,
   * chain and policy are checked and the result has no TCB status).
   */
  requireCollateral?: boolean;
}

/** A policy with defaults applied and hex normalised to lower case. */
export interface NormalisedPolicy {
  acceptableTcbStatuses: readonly TcbStatus[];
  allowDebug: boolean;
  approvedMeasurements: readonly MeasurementSet[] | undefined;
  expectedReportData: Buffer | undefined;
  requireCollateral: boolean;
}

/** Validates a caller's policy; a malformed one is a programmer error and throws TypeError. */
export function normalisePolicy(policy: VerificationPolicy = {}): NormalisedPolicy {
  const statuses = policy.acceptableTcbStatuses ?? ["UpToDate"];
  for (const s of statuses) {
    if (!(TCB_STATUSES as readonly string[]).includes(s)) {
      throw new TypeError(`policy.acceptableTcbStatuses: unknown status ${String(s)}`);
    }
  }
  let expectedReportData: Buffer | undefined;
  if (policy.expectedReportData !== undefined) {
    const hex = policy.expectedReportData;
    if (!isHex(hex) || hex.length !== 128) {
      throw new TypeError("policy.expectedReportData must be 64 bytes of hex");
    }
    expectedReportData = Buffer.from(hex, "hex");
  }
  return {
    acceptableTcbStatuses: statuses.filter((s) => s !== "Revoked"),
    allowDebug: policy.allowDebug === true,
    approvedMeasurements: policy.approvedMeasurements?.map(normaliseSet),
    expectedReportData,
    requireCollateral: policy.requireCollateral === true,
  };
}

function normaliseSet(set: MeasurementSet, index: number): MeasurementSet {
  const out: Record<string, string> = {};
  if (set.id !== undefined) out["id"] = set.id;
  for (const [field, size] of Object.entries(MEASUREMENT_FIELDS)) {
    const value = set[field as MeasurementField];
    if (value === undefined) continue;
    if (typeof value !== "string" || !isHex(value) || value.length !== size * 2) {
      throw new TypeError(
        `policy.approvedMeasurements[${index}].${field} must be ${size} bytes of hex`,
      );
    }
    out[field] = value.toLowerCase();
  }
  if (out["mrtd"] === undefined) {
    throw new TypeError(`policy.approvedMeasurements[${index}].mrtd is required`);
  }
  return out as MeasurementSet;
}

/** True when TD_ATTRIBUTES bit 0 (DEBUG) is set. */
export function isDebugTd(body: TdReportBody): boolean {
  return (Number.parseInt(body.td_attributes.slice(0, 2), 16) & 0x01) === 1;
}

/** The id (or `#index`) of the first approved set the body matches, or undefined. */
export function matchMeasurements(
  body: TdReportBody,
  sets: readonly MeasurementSet[],
): string | undefined {
  for (const [index, set] of sets.entries()) {
    const matches = Object.keys(MEASUREMENT_FIELDS).every((field) => {
      const want = set[field as MeasurementField];
      return want === undefined || want === body[field as MeasurementField];
    });
    if (matches) return set.id ?? `#${index}`;
  }
  return undefined;
}

/** Constant-time REPORTDATA comparison: it may carry a nonce an attacker tries to guess. */
export function reportDataMatches(body: TdReportBody, expected: Buffer): boolean {
  const actual = Buffer.from(body.reportdata, "hex");
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}
