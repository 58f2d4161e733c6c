// The tier-4 rows: one stream, through the same gateway to the same TD proxy process and the
// same simulated node, once plain at tier 3 (the TD proxy passes it through) and once sealed
// in a tier-4 session: sealed on the client with @zml/seal, opened by the TD proxy, every
// event sealed there and opened again on the client. What differs is the sealing (and what a
// sealed request needs: its session).
import { createClient } from "@zml/client";
import type { ConfidentialSession } from "@zml/client";
import { SEALED_REQUEST_MEDIA_TYPE } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { request } from "undici";
import { BENCH_API_KEY } from "./bench-stack.ts";
import type { BenchStack } from "./bench-stack.ts";
import type { LoadPlan } from "./plan.ts";

type Plan = Omit<LoadPlan, "id" | "durationMs">;

export interface SealingPlans {
  /** The stream in clear, `tier: 3`: the node declared at tier 3. */
  plain: Plan;
  /** The same body sealed to a tier-4 session: the node declared at tier 4. */
  sealed: Plan;
  /** Ends the session. */
  close(): Promise<void>;
}

const PATH = "/v1/chat/completions";

/** What a sealing row takes from its scenario (a `Scenario` of scenarios.ts). */
export interface SealingScenario {
  key: string;
  node: { model: string; completionTokens?: number };
  concurrency: number;
  stream: boolean;
  promptBytes?: number;
  spreadStartsMs?: number;
}

/**
 * Opens a tier-4 session (its quote verified by the SDK against the bench's test root and
 * measurement), checks that each side reaches the node it should, and returns both plans.
 */
export async function sealingPlans(
  stack: BenchStack,
  scenario: SealingScenario,
  chatBody: (model: string, stream: boolean, promptBytes: number | undefined) => string,
): Promise<SealingPlans> {
  const tee = stack.tee;
  const model = scenario.node.model;
  if (tee === undefined || tee.model !== model) {
    throw new Error(`${scenario.key}: the stack has no TD proxy for ${model}`);
  }
  const inner = chatBody(model, scenario.stream, scenario.promptBytes);
  const plainBody = JSON.stringify({ ...(JSON.parse(inner) as object), tier: 3 });
  const session = await openSession(stack, model);
  try {
    await checkRoutes(stack, session, plainBody, tee.nodeIds);
  } catch (error) {
    await session.close().catch(() => undefined);
    throw error;
  }
  const common = {
    origin: stack.intakeUrl,
    path: PATH,
    concurrency: scenario.concurrency,
    stream: scenario.stream,
    ...(scenario.stream ? { expectTokens: scenario.node.completionTokens ?? 16 } : {}),
    ...(scenario.spreadStartsMs ? { spreadStartsMs: scenario.spreadStartsMs } : {}),
    ttftAtEvent: true,
  };
  const auth = `Bearer ${BENCH_API_KEY}`;
  return {
    plain: {
      ...common,
      body: plainBody,
      headers: { "content-type": "application/json", authorization: auth },
    },
    sealed: {
      ...common,
      body: inner,
      headers: { "content-type": SEALED_REQUEST_MEDIA_TYPE, authorization: auth },
      sealed: {
        sessionId: session.session_id,
        sessionPublicKey: session.attestation.session_public_key,
        model,
      },
    },
    close: () => session.close().catch(() => undefined),
  };
}

/** A session as a client opens one; retried until the tier-4 node is attested and routable. */
async function openSession(stack: BenchStack, model: string): Promise<ConfidentialSession> {
  const tee = stack.tee!;
  const client = createClient({
    baseUrl: stack.intakeUrl,
    apiKey: BENCH_API_KEY,
    timeoutMs: 10_000,
  });
  let last = "no answer";
  try {
    return await pollUntil(
      async () => {
        try {
          return await client.sessions.create({
            model,
            trustedRootPem: tee.rootPem,
            approvedMeasurements: [tee.measurement],
          });
        } catch (error) {
          last = String(error);
          return undefined;
        }
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
  } catch (error) {
    throw new Error(`no tier-4 session for ${model} in time; last error: ${last}`, {
      cause: error,
    });
  }
}

/**
 * One request per side before measuring: the plain one must be served by the tier-3 entry
 * and the sealed one by the tier-4 entry, both the same TD proxy (else the rows would
 * compare something else than sealing).
 */
async function checkRoutes(
  stack: BenchStack,
  session: ConfidentialSession,
  plainBody: string,
  nodeIds: { tier3: string; tier4: string },
): Promise<void> {
  const res = await request(`${stack.intakeUrl}${PATH}`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${BENCH_API_KEY}` },
    body: plainBody,
  });
  await res.body.text();
  const routing = String(res.headers["x-zml-routing"] ?? "");
  if (res.statusCode !== 200 || !routing.includes(`node="${nodeIds.tier3}"`)) {
    throw new Error(`the plain request was not served by ${nodeIds.tier3}: ${routing}`);
  }
  if (session.node_id !== nodeIds.tier4) {
    throw new Error(`the session is on ${session.node_id}, not ${nodeIds.tier4}`);
  }
  const stream = await session.chat({
    messages: [{ role: "user", content: "ready?" }],
    stream: true,
  });
  for await (const chunk of stream) void chunk;
  if (stream.routing?.node !== nodeIds.tier4 || stream.routing.tier !== 4) {
    throw new Error(`the sealed stream was not served by ${nodeIds.tier4} at tier 4`);
  }
}
