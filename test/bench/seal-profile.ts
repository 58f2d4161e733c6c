// Where a sealed stream's time goes, step by step, in one process with nothing else on its
// event loop: the channel's setup on each side (once per session), the client sealing a
// request, the TD opening it, the TD sealing each event of the answer, the client opening
// them. Each step's wall time (one at a time, and 16 at once as under load) and CPU time per
// operation, and how many WebCrypto calls it makes (none since format 2).
// `node test/bench/seal-profile.ts [--iterations 2000] [--events 18] [--json]`
import {
  createCipheriv,
  createHmac,
  diffieHellman,
  generateKeyPairSync,
  randomBytes,
} from "node:crypto";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { createSessionKeyPair, RecipientChannel, SealedChannel } from "@zml/seal";
import type { ResponseSealer } from "@zml/seal";
import { sodiumAeadKeys } from "@zml/seal/sodium";
import { quantile } from "./stats.ts";

const { values } = parseArgs({
  options: {
    iterations: { type: "string", default: "2000" },
    events: { type: "string", default: "18" },
    json: { type: "boolean", default: false },
  },
});
const ITERATIONS = Number(values.iterations);
const EVENTS = Number(values.events);

const MODEL = "bench-tee";
const PATH = "/v1/chat/completions";
const BODY = Buffer.from(
  JSON.stringify({
    model: MODEL,
    messages: [{ role: "user", content: "Say hello" }],
    stream: true,
  }),
);
// An event of the simulated vLLM stream, about its size.
const EVENT = Buffer.from(
  `data: ${JSON.stringify({
    id: "chatcmpl-0123456789abcdef",
    object: "chat.completion.chunk",
    created: 1_790_000_000,
    model: MODEL,
    choices: [{ index: 0, delta: { content: " word" }, finish_reason: null }],
  })}\n\n`,
);

const SUBTLE_METHODS = [
  "importKey",
  "exportKey",
  "generateKey",
  "deriveBits",
  "sign",
  "encrypt",
  "decrypt",
  "digest",
] as const;

/**
 * Counts the WebCrypto (`crypto.subtle`) calls made until `restore`, and the wall time each
 * kind took from call to settled (the awaited share of a step run one at a time).
 */
function countSubtle(): {
  calls: Map<string, number>;
  wallUs: Map<string, number>;
  restore(): void;
} {
  const subtle = globalThis.crypto.subtle as unknown as Record<string, unknown>;
  const calls = new Map<string, number>();
  const wallUs = new Map<string, number>();
  const originals = new Map<string, unknown>();
  for (const name of SUBTLE_METHODS) {
    const original = subtle[name] as (...args: unknown[]) => Promise<unknown>;
    originals.set(name, original);
    subtle[name] = (...args: unknown[]) => {
      calls.set(name, (calls.get(name) ?? 0) + 1);
      const t0 = performance.now();
      return original.apply(globalThis.crypto.subtle, args).finally(() => {
        wallUs.set(name, (wallUs.get(name) ?? 0) + (performance.now() - t0) * 1000);
      });
    };
  }
  return {
    calls,
    wallUs,
    restore() {
      for (const [name, fn] of originals) subtle[name] = fn;
    },
  };
}

interface StepFigures {
  step: string;
  /** One at a time: wall µs per operation, p50 and p99. */
  p50Us: number;
  p99Us: number;
  /** CPU µs per operation (user + system of this process), one at a time. */
  cpuUs: number;
  /** 16 at once (`Promise.all`): wall µs per batch of 16 ÷ 16. */
  at16Us: number;
  /** WebCrypto calls per operation. */
  subtleCalls: number;
  /** Per WebCrypto method: calls and awaited wall µs per operation (one at a time). */
  subtle: Record<string, { calls: number; wallUs: number }>;
}

/** `run` on `prepare`'s inputs (made outside the timing), one at a time, then 16 at once. */
async function measure<T>(
  step: string,
  prepare: (i: number) => T | Promise<T>,
  run: (prepared: T) => unknown,
): Promise<StepFigures> {
  const warm = Math.min(200, ITERATIONS);
  for (let i = 0; i < warm; i++) await run(await prepare(i));
  const inputs: T[] = [];
  for (let i = 0; i < ITERATIONS; i++) inputs.push(await prepare(i));
  const wall = new Float64Array(ITERATIONS);
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < ITERATIONS; i++) {
    const t0 = performance.now();
    await run(inputs[i]!);
    wall[i] = (performance.now() - t0) * 1000;
  }
  const cpu = process.cpuUsage(cpu0);
  wall.sort();
  const batches = Math.floor(ITERATIONS / 16);
  const more: T[] = [];
  for (let i = 0; i < batches * 16; i++) more.push(await prepare(i));
  const t16 = performance.now();
  for (let b = 0; b < batches; b++) {
    await Promise.all(more.slice(b * 16, b * 16 + 16).map((p) => run(p)));
  }
  const at16Us = ((performance.now() - t16) * 1000) / (batches * 16);
  const probes = Math.min(500, ITERATIONS);
  const probeInputs: T[] = [];
  for (let i = 0; i < probes; i++) probeInputs.push(await prepare(i));
  const counter = countSubtle();
  try {
    for (const input of probeInputs) await run(input);
  } finally {
    counter.restore();
  }
  const subtle: StepFigures["subtle"] = {};
  for (const [name, calls] of counter.calls) {
    subtle[name] = { calls: calls / probes, wallUs: (counter.wallUs.get(name) ?? 0) / probes };
  }
  return {
    step,
    p50Us: quantile(wall, 0.5),
    p99Us: quantile(wall, 0.99),
    cpuUs: (cpu.user + cpu.system) / ITERATIONS,
    at16Us,
    subtleCalls: [...counter.calls.values()].reduce((a, b) => a + b, 0) / probes,
    subtle,
  };
}

const pair = createSessionKeyPair();
const sessionPublicKey = pair.publicKeySpki.toString("base64");
const sessionId = `ses-${"0".repeat(32)}`;
const newChannel = () => new SealedChannel({ sessionId, sessionPublicKey });
// The session's channel, on both sides, as the SDK and the TD keep it (the TD's AEAD keys are
// libsodium's, as the TD proxy makes them).
const channel = newChannel();
const tdKeys = await sodiumAeadKeys();
const td = new RecipientChannel(pair, channel.suite.name, channel.enc, tdKeys);
const seal = () => channel.seal({ path: PATH, body: BODY, model: MODEL, stream: true });

/** The TD's half of one stream: the head, `EVENTS` events, the final chunk. */
function sealStream(sealer: ResponseSealer): Buffer[] {
  const out = [sealer.streamHead({ status: 200, content_type: "text/event-stream" })];
  for (let i = 0; i < EVENTS; i++) out.push(sealer.streamEvent(EVENT));
  out.push(sealer.streamEnd());
  return out;
}

const steps: StepFigures[] = [];
steps.push(
  await measure(
    "client: channel setup, once per session (HPKE SetupBaseS, export)",
    () => 0,
    () => newChannel(),
  ),
);
steps.push(
  await measure(
    "TD: channel setup, once per channel (HPKE SetupBaseR, export)",
    () => newChannel().enc,
    (enc) => new RecipientChannel(pair, channel.suite.name, enc, tdKeys),
  ),
);
steps.push(await measure("client: seal a request (one AEAD)", () => 0, seal));
steps.push(
  await measure(
    "TD: open a request (one AEAD, answer keys)",
    () => seal(),
    (req) => td.open(req.envelope, PATH),
  ),
);
steps.push(
  await measure(
    `TD: seal the answer (head, ${EVENTS} events, final chunk)`,
    () => td.open(seal().envelope, PATH).sealer,
    (sealer) => sealStream(sealer),
  ),
);
steps.push(
  await measure(
    `client: open the answer (answer keys, head, ${EVENTS} events, final chunk)`,
    () => {
      const req = seal();
      return { req, wire: sealStream(td.open(req.envelope, PATH).sealer) };
    },
    ({ req, wire }) => {
      const reader = req.opener.streamReader();
      for (const bytes of wire) reader.push(bytes);
      reader.finish();
    },
  ),
);
// What a synchronous DHKEM(X25519) costs on node:crypto, for comparison: an ephemeral key
// pair, one X25519 agreement, and the ~10 HMAC-SHA256 of HPKE's KEM and key schedule.
const recipient = generateKeyPairSync("x25519");
steps.push(
  await measure(
    "for comparison: node:crypto X25519 key pair + agreement + 10 HMAC (sync)",
    () => 0,
    () => {
      const eph = generateKeyPairSync("x25519");
      let secret = diffieHellman({ privateKey: eph.privateKey, publicKey: recipient.publicKey });
      for (let i = 0; i < 10; i++) secret = createHmac("sha256", secret).update("x").digest();
      return secret;
    },
  ),
);

// The TD's half of it: the agreement with its key (no key pair to make) and the HMACs.
const ephemeral = generateKeyPairSync("x25519");
steps.push(
  await measure(
    "for comparison: node:crypto X25519 agreement + 10 HMAC (sync), the TD's half",
    () => 0,
    () => {
      let secret = diffieHellman({
        privateKey: recipient.privateKey,
        publicKey: ephemeral.publicKey,
      });
      for (let i = 0; i < 10; i++) secret = createHmac("sha256", secret).update("x").digest();
      return secret;
    },
  ),
);

// And what one event's AEAD alone costs (the answer's chunks are sealed with it: a cipher
// object per chunk, as each chunk has its own nonce), for both suites' AEADs.
const aeadNonce = randomBytes(12);
for (const [name, keyBytes] of [
  ["chacha20-poly1305", 32],
  ["aes-128-gcm", 16],
] as const) {
  const key = randomBytes(keyBytes);
  steps.push(
    await measure(
      `for comparison: node:crypto ${name} seal of one ${EVENT.length}-byte event`,
      () => 0,
      () => {
        const cipher = createCipheriv(name as "chacha20-poly1305", key, aeadNonce, {
          authTagLength: 16,
        });
        cipher.setAAD(Buffer.alloc(0), { plaintextLength: EVENT.length });
        return Buffer.concat([cipher.update(EVENT), cipher.final(), cipher.getAuthTag()]);
      },
    ),
  );
}

if (values.json) {
  process.stdout.write(`${JSON.stringify({ iterations: ITERATIONS, events: EVENTS, steps })}\n`);
} else {
  const rows = steps.map((s) =>
    [
      s.step,
      s.p50Us.toFixed(0),
      s.p99Us.toFixed(0),
      s.cpuUs.toFixed(0),
      s.at16Us.toFixed(0),
      String(s.subtleCalls),
    ].join(" | "),
  );
  process.stdout.write(
    [
      `${ITERATIONS} operations per step, one at a time (then 16 at once), Node ${process.version}`,
      "",
      "| step | p50 µs | p99 µs | CPU µs/op | µs/op, 16 at once | WebCrypto calls |",
      "|---|--:|--:|--:|--:|--:|",
      ...rows.map((r) => `| ${r} |`),
      "",
      "WebCrypto calls per operation, and the wall µs spent awaiting them (one at a time):",
      "",
      "| step | method | calls | awaited µs |",
      "|---|---|--:|--:|",
      ...steps.flatMap((s) =>
        Object.entries(s.subtle).map(
          ([name, f]) => `| ${s.step} | ${name} | ${f.calls.toFixed(0)} | ${f.wallUs.toFixed(0)} |`,
        ),
      ),
      "",
    ].join("\n"),
  );
}
