// Shared pieces of the attestation end-to-end tests: a synthetic TEE PKI whose root a stack's
// attestation service trusts when told (`trustedRootPem: pki.root.pem`), TEE node specs, and
// readers of its results.
import { decodeJson, encodeJson, natsConnectionOf, openKv } from "@zml/bus";
import type { Bus } from "@zml/bus";
import {
  ApprovedMeasurementSchema,
  ATTESTATION_RESULTS_BUCKET,
  ATTESTATION_VERIFY_SUBJECT,
  AttestationResultSchema,
  AttestationVerifyReplySchema,
  AttestationVerifyRequestSchema,
  KV_BUCKETS,
} from "@zml/contracts";
import type {
  AttestationResult,
  AttestationVerifyReply,
  AttestationVerifyRequest,
} from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { createTestTee, TEST_MRTD, TEST_RTMR3 } from "@zml/tdx/testing";
import type { SimTeeOptions } from "@zml/node-sim";
import { MODEL } from "../support/stack.ts";
import type { SimSpec, Stack } from "../support/stack.ts";

const testTee = createTestTee({ fmspc: "30606a000000" });
export const { pki, collateral } = testTee;
export const MRTD = TEST_MRTD;
export const MRTD_2 = "a2".repeat(48);
export const RTMR3 = TEST_RTMR3;
export const ROGUE_MRTD = "ee".repeat(48);

/** A tier 3 (or 4) simulated node serving quotes signed by the test PKI. */
export function teeNode(
  nodeId: string,
  tee: Partial<Omit<SimTeeOptions, "signer">> = {},
  tier = 3,
): SimSpec {
  return {
    nodeId,
    family: "H100",
    tier,
    tee: testTee.nodeTee({ rtmr3: RTMR3, ...tee }),
  };
}

/** Writes the approved measurements an operator would apply, before the services start. */
export async function approveMeasurements(
  bus: Bus,
  sets: Array<{ id: string; mrtd: string; tier?: number; model?: string }>,
): Promise<void> {
  const kv = await openKv(bus, KV_BUCKETS.measurements);
  for (const s of sets) {
    const value = { model: MODEL, tier: 3, rtmr3: RTMR3, ...s };
    await kv.put(s.id, encodeJson(s.id, ApprovedMeasurementSchema, value));
  }
}

export async function readResult(
  stack: Stack,
  nodeId: string,
): Promise<AttestationResult | undefined> {
  const kv = await openKv(stack.bus, ATTESTATION_RESULTS_BUCKET);
  const e = await kv.get(nodeId);
  return e?.operation === "PUT" ? decodeJson(nodeId, AttestationResultSchema, e.value) : undefined;
}

/** Polls the results bucket until the node's result satisfies `accept`. */
export async function waitForResult(
  stack: Stack,
  nodeId: string,
  accept: (r: AttestationResult) => boolean,
  what: string,
  timeoutMs = 20_000,
): Promise<AttestationResult> {
  let last: AttestationResult | undefined;
  try {
    return await pollUntil(
      async () => {
        last = await readResult(stack, nodeId);
        return last && accept(last) ? last : undefined;
      },
      { timeoutMs, intervalMs: 50, message: `${nodeId}: ${what}` },
    );
  } catch (error) {
    throw new Error(
      `${nodeId}: ${what} not seen; last result ${JSON.stringify(last && { ok: last.ok, reason: last.reason })}`,
      { cause: error },
    );
  }
}

/** One `zml.attestation.verify` round trip. */
export async function verifyNode(
  stack: Stack,
  request: Omit<AttestationVerifyRequest, "type">,
): Promise<AttestationVerifyReply> {
  const data = encodeJson(ATTESTATION_VERIFY_SUBJECT, AttestationVerifyRequestSchema, {
    type: "attestation.verify.v1",
    ...request,
  });
  const reply = await natsConnectionOf(stack.bus).request(ATTESTATION_VERIFY_SUBJECT, data, {
    timeout: 15_000,
  });
  return decodeJson(ATTESTATION_VERIFY_SUBJECT, AttestationVerifyReplySchema, reply.data);
}

/** The result of a verify reply, failing the test on an error reply. */
export function resultOf(reply: AttestationVerifyReply): AttestationResult {
  if ("error" in reply)
    throw new Error(`verify failed: ${reply.error.code}: ${reply.error.message}`);
  return reply.result;
}
