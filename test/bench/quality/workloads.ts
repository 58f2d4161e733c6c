// The routing-quality bench's workloads: pure functions of a seed, so that every side of a run
// (and every run with the same seed) sends the same requests at the same offsets. Arrivals are
// open-loop: a Poisson process whatever the answers do.
import { createHash } from "node:crypto";
import { uniformFloat64 } from "pure-rand/distribution/uniformFloat64";
import { mersenne } from "pure-rand/generator/mersenne";
import type { RandomGenerator } from "pure-rand/types/RandomGenerator";

export const WORKLOAD_KEYS = ["shared-uniform", "zipf-hot", "multi-turn", "no-prefix"] as const;
export type WorkloadKey = (typeof WORKLOAD_KEYS)[number];

export interface Workload {
  key: WorkloadKey;
  title: string;
  /** Mean arrivals per second (Poisson). */
  ratePerS: number;
  /** `max_tokens` of every request (the nodes' answers are that long). */
  outputTokens: number;
  /** Shared-prompt workloads: tenants, and the system prompt's tokens. */
  tenants: number;
  systemPromptTokens: number;
  /** Tokens of each user turn. */
  userTokens: number;
  /** zipf-hot: the exponent of the tenants' popularity (tenant 0 is the hot one). */
  zipfExponent?: number;
  /** multi-turn: conversations open at once, and turns before one is replaced by a new one. */
  conversations?: number;
  maxTurns?: number;
}

/** The four workloads of the routing-quality bench, at their full rates. */
export function workloads(): Record<WorkloadKey, Workload> {
  return {
    "shared-uniform": {
      key: "shared-uniform",
      title: "shared system prompts, 64 tenants uniform",
      ratePerS: 60,
      outputTokens: 16,
      tenants: 64,
      systemPromptTokens: 2000,
      userTokens: 40,
    },
    "zipf-hot": {
      key: "zipf-hot",
      title: "Zipf tenants, hot tenant over one node's capacity",
      ratePerS: 100,
      outputTokens: 64,
      tenants: 64,
      systemPromptTokens: 2000,
      userTokens: 40,
      // Tenant 0 gets 38 % of the requests: ~38 req/s, above the ~31 req/s one node serves at
      // 32 sequences of 64 tokens (docs in quality/README.md).
      zipfExponent: 1.4,
    },
    "multi-turn": {
      key: "multi-turn",
      title: "multi-turn conversations resending their context",
      ratePerS: 40,
      outputTokens: 32,
      tenants: 0,
      systemPromptTokens: 300,
      userTokens: 60,
      conversations: 64,
      maxTurns: 10,
    },
    "no-prefix": {
      key: "no-prefix",
      title: "no shared prefix",
      ratePerS: 60,
      outputTokens: 16,
      tenants: 0,
      systemPromptTokens: 0,
      userTokens: 1000,
    },
  };
}

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

/** One request of a run: when it is sent, what it says, and the key an affinity client hashes. */
export interface QualityRequest {
  /** Milliseconds after the run's start. */
  atMs: number;
  /** Tenant (or conversation) the request belongs to; unique per request when none. */
  affinityKey: string;
  messages: ChatMessage[];
}

const WORDS = (
  "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november " +
  "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
).split(" ");

/** A seeded generator of floats in [0, 1). */
export function seededRandom(seed: number): () => number {
  const rng: RandomGenerator = mersenne(seed);
  return () => uniformFloat64(rng);
}

/** Text of about `tokens` tokens (4 characters each), starting with `lead` so prefixes differ. */
function text(random: () => number, lead: string, tokens: number): string {
  let out = `${lead} `;
  const target = tokens * 4;
  while (out.length < target) {
    out += `${WORDS[Math.floor(random() * WORDS.length)]!} `;
  }
  return out.slice(0, target);
}

/** Sampler of tenant indexes with P(k) ∝ 1 / (k + 1)^s. */
function zipf(random: () => number, n: number, s: number): () => number {
  const cumulative: number[] = [];
  let total = 0;
  for (let k = 0; k < n; k++) {
    total += 1 / (k + 1) ** s;
    cumulative.push(total);
  }
  return () => {
    const u = random() * total;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (cumulative[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

interface Conversation {
  id: string;
  messages: ChatMessage[];
  turns: number;
}

/**
 * The requests of one run of `workload` lasting `durationS` at `ratePerS` arrivals per second,
 * from `seed`. The same arguments give the same requests. `salt` goes into every prompt's
 * first words and changes nothing else (arrivals, tenants, sizes): two sides of a run send the
 * same traffic without sharing a single prefix, so no side inherits another's placements.
 */
export function generateRequests(
  workload: Workload,
  seed: number,
  durationS: number,
  ratePerS: number = workload.ratePerS,
  salt = "",
): QualityRequest[] {
  const arrivals = seededRandom(seed);
  const choices = seededRandom(seed ^ 0xc401ce);
  const content = seededRandom(seed ^ 0x5eed);
  const systemPrompts = Array.from({ length: workload.tenants }, (_, t) =>
    text(content, `[${salt}] You are the assistant of tenant ${t}.`, workload.systemPromptTokens),
  );
  const pickTenant =
    workload.zipfExponent === undefined
      ? () => Math.floor(choices() * workload.tenants)
      : zipf(choices, workload.tenants, workload.zipfExponent);
  let conversationCount = 0;
  const newConversation = (): Conversation => {
    const id = `c${conversationCount++}`;
    const system = text(
      content,
      `[${salt}] Conversation ${id} begins.`,
      workload.systemPromptTokens,
    );
    return { id, messages: [{ role: "system", content: system }], turns: 0 };
  };
  const open = Array.from({ length: workload.conversations ?? 0 }, newConversation);

  const requests: QualityRequest[] = [];
  let at = 0;
  for (let i = 0; ; i++) {
    // Exponential gaps: a Poisson process of rate `ratePerS`.
    at += (-Math.log(1 - arrivals()) / ratePerS) * 1000;
    if (at >= durationS * 1000) break;
    const user = text(content, `[${salt}] Request ${i}:`, workload.userTokens);
    if (workload.key === "multi-turn") {
      const slot = Math.floor(choices() * open.length);
      let conversation = open[slot]!;
      if (conversation.turns >= (workload.maxTurns ?? 1)) {
        conversation = newConversation();
        open[slot] = conversation;
      }
      if (conversation.turns > 0) {
        // The previous answer goes back into the context, as a chat client resends it.
        const answer = text(content, `Answer ${conversation.turns}.`, workload.outputTokens);
        conversation.messages.push({ role: "assistant", content: answer });
      }
      conversation.messages.push({ role: "user", content: user });
      conversation.turns += 1;
      requests.push({
        atMs: at,
        affinityKey: conversation.id,
        messages: [...conversation.messages],
      });
    } else if (workload.tenants > 0) {
      const tenant = pickTenant();
      requests.push({
        atMs: at,
        affinityKey: `t${tenant}`,
        messages: [
          { role: "system", content: systemPrompts[tenant]! },
          { role: "user", content: user },
        ],
      });
    } else {
      requests.push({
        atMs: at,
        affinityKey: `r${i}`,
        messages: [{ role: "user", content: user }],
      });
    }
  }
  return requests;
}

/** The node a client-side affinity sends `key` to: its SHA-256's first 4 bytes, modulo. */
export function hashedNode(key: string, nodes: number): number {
  return createHash("sha256").update(key).digest().readUInt32BE(0) % nodes;
}
