// TEST ONLY, for the Python SDK's tests: the TypeScript sealed channel (`@zml/seal`) on the
// other end of the Python one, so each side is checked against the other byte for byte.
// One JSON command per stdin line, one JSON answer per stdout line; ends at EOF.
//
//   {"op":"keypair"}                       → {"session_public_key"}  (a TD session key)
//   {"op":"open","envelope","path",        → {"body"} and the TS TD's sealed answer to it
//                                            (in the channel of the envelope's enc):
//    "answer":{"status","content_type","body"} | "events":[b64…]}
//                                          → "sealed" (b64 of the JSON) | "sse" (text)
//   {"op":"seal","input":{…SealInput, sessionId, sessionPublicKey, suite?, body b64}}
//                                          → {"id","envelope"}  (a TS client: one channel per
//                                            session, key and suite)
//   {"op":"open_answer","id","answer"}     → {"status","content_type","body"}
//   {"op":"open_stream","id","sse"}        → {"parts":[…]}
//   errors                                 → {"error": code}
//
// Bytes travel as base64. Run from the repository root: node libs/python-sdk/tests/seal_interop.ts
import { createInterface } from "node:readline";
import {
  createSessionKeyPair,
  RecipientChannel,
  SealedChannel,
  SealedChannelError,
} from "@zml/seal";
import type { ResponseOpener, SessionKeyPair } from "@zml/seal";
import type { SealedRequestEnvelope, SealedSuite } from "@zml/contracts/sealed";

const b64 = (bytes: Uint8Array): string => Buffer.from(bytes).toString("base64");
const unb64 = (text: string): Buffer => Buffer.from(text, "base64");

let key: SessionKeyPair | undefined;
/** The TD's channels of `key`, by enc; the client's channels, by session, key and suite. */
const recipients = new Map<string, RecipientChannel>();
const senders = new Map<string, SealedChannel>();
const openers = new Map<number, ResponseOpener>();
let nextId = 0;

interface Command {
  op: string;
  envelope?: SealedRequestEnvelope;
  path?: string;
  answer?: { status: number; content_type: string; body: string } | string;
  events?: string[];
  input?: {
    path: string;
    body: string;
    model: string;
    sessionId: string;
    stream: boolean;
    seq: number;
    sessionPublicKey: string;
    suite?: SealedSuite;
    policy?: string;
    maxTokens?: number;
  };
  id?: number;
  sse?: string;
}

async function run(command: Command): Promise<Record<string, unknown>> {
  switch (command.op) {
    case "keypair": {
      key = createSessionKeyPair();
      recipients.clear();
      return { session_public_key: b64(key.publicKeySpki), key_id: key.keyId };
    }
    case "open": {
      if (key === undefined) throw new Error("no key pair");
      const envelope = command.envelope!;
      const channel =
        recipients.get(envelope.enc) ?? new RecipientChannel(key, envelope.suite, envelope.enc);
      const { body, sealer } = channel.open(envelope, command.path!);
      recipients.set(envelope.enc, channel);
      if (command.events !== undefined) {
        const sse = Buffer.concat([
          sealer.streamHead({ status: 200, content_type: "text/event-stream" }),
          ...command.events.map((e) => sealer.streamEvent(unb64(e))),
          sealer.streamEnd(),
        ]).toString("utf8");
        return { body: b64(body), sse };
      }
      const answer = command.answer as { status: number; content_type: string; body: string };
      const sealed = sealer.answer(
        { status: answer.status, content_type: answer.content_type },
        unb64(answer.body),
      );
      return { body: b64(body), sealed: b64(sealed) };
    }
    case "seal": {
      const { sessionId, sessionPublicKey, suite, body, ...rest } = command.input!;
      const id = `${sessionId} ${sessionPublicKey} ${suite ?? ""}`;
      const channel =
        senders.get(id) ??
        new SealedChannel({ sessionId, sessionPublicKey, ...(suite ? { suite } : {}) });
      senders.set(id, channel);
      const request = channel.seal({ ...rest, body: unb64(body) });
      const opener = nextId++;
      openers.set(opener, request.opener);
      return { id: opener, envelope: request.envelope, bytes: b64(request.bytes) };
    }
    case "open_answer": {
      const opened = openers.get(command.id!)!.openAnswer(unb64(command.answer as string));
      return { status: opened.status, content_type: opened.contentType, body: b64(opened.body) };
    }
    case "open_stream": {
      const reader = openers.get(command.id!)!.streamReader();
      const parts = reader.push(Buffer.from(command.sse!, "utf8"));
      reader.finish();
      return {
        parts: parts.map((p) =>
          p.kind === "event"
            ? { kind: p.kind, event: b64(p.event) }
            : p.kind === "head"
              ? { kind: p.kind, status: p.head.status, content_type: p.head.content_type }
              : { kind: p.kind },
        ),
      };
    }
    default:
      throw new Error(`unknown op ${command.op}`);
  }
}

for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === "") continue;
  let answer: Record<string, unknown>;
  try {
    answer = await run(JSON.parse(line) as Command);
  } catch (error) {
    answer = {
      error: error instanceof SealedChannelError ? error.code : String(error),
    };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
