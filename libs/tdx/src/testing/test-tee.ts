// One synthetic TEE for a test file: a PKI, collateral for it, and the settings a simulated
// tier 3/4 node quotes with. The parts every TEE test assembled the same way by hand.
import type { KeyObject } from "node:crypto";
import type { Collateral } from "../collateral.ts";
import { createTestCollateral, createTestPki } from "./test-ca.ts";
import type { TestPki } from "./test-ca.ts";

/** The MRTD the test TEEs report unless told otherwise (48 bytes of hex). */
export const TEST_MRTD = "a1".repeat(48);
/** The RTMR3 a test TEE reports when a test pins it (48 bytes of hex). */
export const TEST_RTMR3 = "b3".repeat(48);

const HOUR_MS = 3_600_000;

/** What signs a simulated node's quotes: the PCK chain (leaf first) and the leaf's key. */
export interface TestQuoteSigner {
  pckChainPem: string;
  pckKey: KeyObject;
}

/** A simulated node's TEE settings (`tee` of node-sim's `startSimNode`). */
export interface TestNodeTee {
  signer: TestQuoteSigner;
  mrtd: string;
  collateral: Readonly<Record<string, string>>;
}

export interface TestTee {
  pki: TestPki;
  collateral: Collateral;
  signer: TestQuoteSigner;
  /**
   * Settings for a simulated TEE node: quotes signed by {@link TestTee.signer}, measuring
   * {@link TEST_MRTD}, serving {@link TestTee.collateral}; `extra` adds or replaces fields
   * (another MRTD, an RTMR, a fault).
   */
  nodeTee<Extra extends object = Record<never, never>>(extra?: Extra): TestNodeTee & Extra;
}

export interface TestTeeOptions {
  /** The platform's FMSPC, in the PCK and the collateral alike (default the test PKI's). */
  fmspc?: string;
  /** When the collateral was issued (default an hour before now). */
  issueDate?: Date;
  /** When the collateral must be replaced (default a day after now). */
  nextUpdate?: Date;
}

/** A fresh test PKI with collateral that is current now, unless told other dates. */
export function createTestTee(options: TestTeeOptions = {}): TestTee {
  const platform = options.fmspc === undefined ? {} : { fmspc: options.fmspc };
  const pki = createTestPki(platform);
  const now = Date.now();
  const collateral = createTestCollateral({
    pki,
    ...platform,
    issueDate: options.issueDate ?? new Date(now - HOUR_MS),
    nextUpdate: options.nextUpdate ?? new Date(now + 24 * HOUR_MS),
  });
  const signer = { pckChainPem: pki.pckChainPem, pckKey: pki.pck.key };
  return {
    pki,
    collateral,
    signer,
    nodeTee: <Extra extends object>(extra?: Extra) => ({
      signer,
      mrtd: TEST_MRTD,
      collateral: { ...collateral },
      ...(extra as Extra),
    }),
  };
}
