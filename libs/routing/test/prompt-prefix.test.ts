import { describe, expect, it } from "vitest";
import {
  decodePromptPrefix,
  encodePromptPrefix,
  PREFIX_BLOCK_CHARS,
  PREFIX_MAX_BLOCKS,
  promptPrefixOf,
} from "../src/index.ts";

const system = (tenant: string) => ({
  role: "system",
  content: `You are the assistant of ${tenant}. `.padEnd(4000, "Follow the house rules. "),
});
const user = (text: string) => ({ role: "user", content: text });

describe("prompt prefix digests", () => {
  it("gives two prompts with one system prompt the same leading digests, and only those", () => {
    const a = promptPrefixOf([system("acme"), user("What is our refund policy?".repeat(20))])!;
    const b = promptPrefixOf([system("acme"), user("Where is my order number 1234?".repeat(20))])!;
    const shared = Math.floor(4000 / PREFIX_BLOCK_CHARS);
    expect(a.digests.length).toBeGreaterThan(shared);
    expect(Array.from(a.digests.slice(0, shared))).toEqual(Array.from(b.digests.slice(0, shared)));
    expect(a.digests[shared + 1]).not.toBe(b.digests[shared + 1]);
  });

  it("tells tenants, roles and message boundaries apart", () => {
    const acme = promptPrefixOf([system("acme")])!;
    const globex = promptPrefixOf([system("globex")])!;
    expect(acme.digests[0]).not.toBe(globex.digests[0]);
    const asUser = promptPrefixOf([{ ...system("acme"), role: "user" }])!;
    expect(asUser.digests[0]).not.toBe(acme.digests[0]);
    const text = "x".repeat(PREFIX_BLOCK_CHARS * 2);
    const one = promptPrefixOf([user(text)])!;
    const split = promptPrefixOf([user(text.slice(0, 300)), user(text.slice(300))])!;
    expect(split.digests[1]).not.toBe(one.digests[1]);
  });

  it("chains each block to its whole prefix: the same block after another prefix differs", () => {
    const block = "y".repeat(PREFIX_BLOCK_CHARS);
    const a = promptPrefixOf("a".repeat(PREFIX_BLOCK_CHARS) + block)!;
    const b = promptPrefixOf("b".repeat(PREFIX_BLOCK_CHARS) + block)!;
    expect(a.digests[1]).not.toBe(b.digests[1]);
  });

  it("counts every character but digests at most the first blocks", () => {
    const huge = promptPrefixOf("z".repeat(PREFIX_BLOCK_CHARS * (PREFIX_MAX_BLOCKS + 10)))!;
    expect(huge.digests.length).toBe(PREFIX_MAX_BLOCKS);
    expect(huge.chars).toBeGreaterThanOrEqual(PREFIX_BLOCK_CHARS * (PREFIX_MAX_BLOCKS + 10));
  });

  it("has no prefix for a prompt shorter than one block", () => {
    expect(promptPrefixOf([user("Hello")])).toBeUndefined();
    expect(promptPrefixOf(undefined)).toBeUndefined();
  });

  it("walks content parts, instructions and input in order", () => {
    const parts = promptPrefixOf([
      { role: "user", content: [{ type: "text", text: "p".repeat(600) }] },
    ])!;
    const plain = promptPrefixOf([{ role: "user", content: "p".repeat(600) }])!;
    expect(parts.digests.length).toBe(2);
    expect(parts.digests[0]).not.toBe(plain.digests[0]);
    const responses = promptPrefixOf("i".repeat(300), "q".repeat(300))!;
    const swapped = promptPrefixOf("q".repeat(300), "i".repeat(300))!;
    expect(responses.digests[0]).not.toBe(swapped.digests[0]);
  });

  it("round-trips through its header form, which carries only digits and base64url", () => {
    const prefix = promptPrefixOf([system("acme"), user("hi")])!;
    const header = encodePromptPrefix(prefix);
    expect(header).toMatch(/^\d+:[A-Za-z0-9_-]+$/);
    expect(header).not.toContain("acme");
    const back = decodePromptPrefix(header)!;
    expect(back.chars).toBe(prefix.chars);
    expect(Array.from(back.digests)).toEqual(Array.from(prefix.digests));
  });

  it("reads any other header as no prefix", () => {
    const valid = encodePromptPrefix(promptPrefixOf("w".repeat(1000))!);
    const [chars, digests] = valid.split(":") as [string, string];
    for (const bad of [
      "",
      ":",
      "abc",
      `-1:${digests}`,
      `1.5:${digests}`,
      `${chars}:`,
      `${chars}:${digests}=`,
      `${chars}:${digests}A`, // not a whole number of digests
      `10:${digests}`, // fewer characters than its blocks
      `${chars}:${"A".repeat(8 * (PREFIX_MAX_BLOCKS + 1))}`,
      `99999999999999999:${digests}`,
    ]) {
      expect(decodePromptPrefix(bad), bad).toBeUndefined();
    }
  });
});
