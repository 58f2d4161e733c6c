// TCB evaluation against Intel's signed TCB info and QE identity, following Intel QVL
// (TcbLevelCheck, TdxModuleCheck, convergeTcbStatus*). Pure functions of their inputs.
import type { IsvTcbLevel, QeIdentity, TcbInfo, TcbLevel, TcbStatus } from "./collateral.ts";
import type { PckExtension } from "./der.ts";
import type { QeReport, TdReportBody } from "./quote.ts";

/**
 * The first platform TCB level (Intel serves them highest first) whose SGX components and
 * PCESVN are all ≤ the PCK certificate's and whose TDX components are all ≤ TEE_TCB_SVN.
 * When the TDX module major version (TEE_TCB_SVN[1]) is non-zero, components 0 and 1 are
 * the module's own SVN and version, judged by the module identity instead, so they are
 * skipped (Intel `isTdxTcbHigherOrEqual`). Undefined means "TCB not supported".
 */
export function matchPlatformTcbLevel(
  tcbInfo: TcbInfo,
  pck: PckExtension,
  teeTcbSvn: Uint8Array,
): TcbLevel | undefined {
  const skip = (teeTcbSvn[1] ?? 0) > 0 ? 2 : 0;
  return tcbInfo.tcbLevels.find(
    (level) =>
      level.sgxTcbComponents.every((svn, i) => svn <= (pck.sgxTcbComponents[i] ?? 0)) &&
      level.pcesvn <= pck.pcesvn &&
      level.tdxTcbComponents.every((svn, i) => i < skip || svn <= (teeTcbSvn[i] ?? 0)),
  );
}

/** Outcome of the TDX module identity check: the matched level (null for major version 0) or a problem. */
export type ModuleMatch = { level: IsvTcbLevel | null; id: string } | { problem: string };

/**
 * Checks the TDX module (MRSIGNERSEAM, SEAMATTRIBUTES) against the TCB info: the
 * `tdxModuleIdentities` entry `TDX_%02X` of the module major version when it is non-zero,
 * else `tdxModule`; the module's level is the first with `isvsvn` ≤ TEE_TCB_SVN[0].
 */
export function matchTdxModule(tcbInfo: TcbInfo, body: TdReportBody): ModuleMatch {
  const svn = Buffer.from(body.tee_tcb_svn, "hex");
  const major = svn[1] ?? 0;
  const minor = svn[0] ?? 0;
  const id = `TDX_${major.toString(16).toUpperCase().padStart(2, "0")}`;
  const identity = major > 0 ? tcbInfo.tdxModuleIdentities.find((m) => m.id === id) : undefined;
  if (major > 0 && !identity) return { problem: `module ${id} not listed in the TCB info` };
  const expected = identity ?? tcbInfo.tdxModule;
  if (body.mrsignerseam !== expected.mrsigner) {
    return { problem: `MRSIGNERSEAM ${body.mrsignerseam} is not ${expected.mrsigner}` };
  }
  if (!maskedEqual(body.seam_attributes, expected.attributes, expected.attributesMask)) {
    return {
      problem: `SEAMATTRIBUTES ${body.seam_attributes} do not match ${expected.attributes}`,
    };
  }
  if (!identity) return { level: null, id: "tdxModule" };
  const level = identity.tcbLevels.find((l) => l.isvsvn <= minor);
  if (!level) return { problem: `module ${id} ISVSVN ${minor} is below every level` };
  return { level, id };
}

/** Outcome of the QE identity check: the QE's TCB level, or a problem. */
export type QeMatch = { level: IsvTcbLevel } | { problem: string };

/** Checks the QE report against Intel's signed TD_QE identity. */
export function matchQeIdentity(identity: QeIdentity, qe: QeReport): QeMatch {
  if (qe.mrsigner !== identity.mrsigner)
    return { problem: `MRSIGNER ${qe.mrsigner} is not Intel's` };
  if (qe.isvprodid !== identity.isvprodid) {
    return { problem: `ISVPRODID ${qe.isvprodid} is not ${identity.isvprodid}` };
  }
  // Intel QVL reads the identity's miscselect hex as a big-endian number.
  const mask = Number.parseInt(identity.miscselectMask, 16);
  const misc = Number.parseInt(identity.miscselect, 16);
  if ((qe.miscselect & mask) >>> 0 !== (misc & mask) >>> 0) {
    return { problem: `MISCSELECT ${qe.miscselect} does not match ${identity.miscselect}` };
  }
  if (!maskedEqual(qe.attributes, identity.attributes, identity.attributesMask)) {
    return { problem: `ATTRIBUTES ${qe.attributes} do not match ${identity.attributes}` };
  }
  const level = identity.tcbLevels.find((l) => l.isvsvn <= qe.isvsvn);
  if (!level) return { problem: `QE ISVSVN ${qe.isvsvn} is below every level` };
  return { level };
}

/**
 * Folds a QE or TDX module status into the platform status (Intel `convergeTcbStatus…`):
 * anything Revoked makes the result Revoked; an out-of-date component downgrades
 * UpToDate/SWHardeningNeeded to OutOfDate and the Configuration* statuses to
 * OutOfDateConfigurationNeeded.
 */
export function convergeTcbStatus(platform: TcbStatus, component: TcbStatus): TcbStatus {
  if (platform === "Revoked" || component === "Revoked") return "Revoked";
  if (component !== "OutOfDate" && component !== "OutOfDateConfigurationNeeded") return platform;
  if (platform === "UpToDate" || platform === "SWHardeningNeeded") return "OutOfDate";
  if (platform === "ConfigurationNeeded" || platform === "ConfigurationAndSWHardeningNeeded") {
    return "OutOfDateConfigurationNeeded";
  }
  return platform;
}

/** (actual & mask) == (expected & mask), byte by byte over equal-length hex strings. */
function maskedEqual(actualHex: string, expectedHex: string, maskHex: string): boolean {
  const a = Buffer.from(actualHex, "hex");
  const e = Buffer.from(expectedHex, "hex");
  const m = Buffer.from(maskHex, "hex");
  if (a.length !== e.length || a.length !== m.length) return false;
  return a.every((byte, i) => (byte & m[i]!) === (e[i]! & m[i]!));
}
