// The GGUF writer against the format as ggml's gguf.h lays it out, read back by an
// independent little reader written from that description.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  GgufWriteError,
  LLAMA_SERVER_SCRIPT,
  NODE_LLAMA_CPP_VERSION,
  TINY_LLAMA,
  llamaServerPath,
  tinyLlamaGguf,
  writeGguf,
} from "../src/index.ts";
import { repoRoot } from "@zml/harness";

/** Reads the header, metadata keys and tensor descriptions of a GGUF file. */
function readGguf(bytes: Uint8Array) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  const u32 = () => ((at += 4), view.getUint32(at - 4, true));
  const u64 = () => ((at += 8), Number(view.getBigUint64(at - 8, true)));
  const str = () => {
    const n = u64();
    at += n;
    return new TextDecoder().decode(bytes.subarray(at - n, at));
  };
  const sizes: Record<number, number> = {
    0: 1,
    1: 1,
    2: 2,
    3: 2,
    4: 4,
    5: 4,
    6: 4,
    7: 1,
    10: 8,
    11: 8,
    12: 8,
  };
  const value = (type: number): unknown => {
    if (type === 8) return str();
    if (type === 9) {
      const inner = u32();
      const n = u64();
      return Array.from({ length: n }, () => value(inner));
    }
    const size = sizes[type]!;
    const v =
      type === 6
        ? view.getFloat32(at, true)
        : type === 7
          ? view.getUint8(at) === 1
          : view.getUint32(at, true);
    at += size;
    return v;
  };
  const magic = new TextDecoder().decode(bytes.subarray(0, 4));
  at = 4;
  const version = u32();
  const tensorCount = u64();
  const kvCount = u64();
  const metadata = new Map<string, unknown>();
  for (let i = 0; i < kvCount; i++) {
    const key = str();
    metadata.set(key, value(u32()));
  }
  const tensors = Array.from({ length: tensorCount }, () => {
    const name = str();
    const dims = u32();
    const shape = Array.from({ length: dims }, () => u64());
    return { name, shape, type: u32(), offset: u64() };
  });
  const dataStart = Math.ceil(at / 32) * 32;
  return { magic, version, metadata, tensors, dataStart, view };
}

describe("writeGguf", () => {
  it("writes GGUF v3: header, typed metadata, tensor infos, 32-byte aligned F32 data", () => {
    const bytes = writeGguf(
      new Map([
        ["general.architecture", { type: "string", value: "llama" }],
        ["n", { type: "uint32", value: 7 }],
        ["list", { type: "string[]", value: ["a", "bc"] }],
      ]),
      [
        { name: "a", shape: [3], data: Float32Array.of(1, 2, 3) },
        { name: "b", shape: [2, 2], data: Float32Array.of(4, 5, 6, 7) },
      ],
    );
    const file = readGguf(bytes);
    expect(file.magic).toBe("GGUF");
    expect(file.version).toBe(3);
    expect(Object.fromEntries(file.metadata)).toEqual({
      "general.architecture": "llama",
      n: 7,
      list: ["a", "bc"],
    });
    expect(file.tensors).toEqual([
      { name: "a", shape: [3], type: 0, offset: 0 },
      { name: "b", shape: [2, 2], type: 0, offset: 32 },
    ]);
    expect(file.dataStart % 32).toBe(0);
    const float = (i: number) => file.view.getFloat32(file.dataStart + i, true);
    expect([float(0), float(4), float(8)]).toEqual([1, 2, 3]);
    expect([float(32), float(44)]).toEqual([4, 7]);
    expect(bytes.length % 32).toBe(0);
  });

  it("refuses a tensor whose data does not fill its shape", () => {
    expect(() =>
      writeGguf(new Map(), [{ name: "x", shape: [2, 2], data: new Float32Array(3) }]),
    ).toThrow(GgufWriteError);
  });
});

describe("tinyLlamaGguf", () => {
  it("describes a 2-layer llama with a byte vocabulary and a chat template, under 1 MB", () => {
    const bytes = tinyLlamaGguf();
    expect(bytes.length).toBeLessThan(1_000_000);
    const file = readGguf(bytes);
    expect(file.metadata.get("general.architecture")).toBe("llama");
    expect(file.metadata.get("llama.block_count")).toBe(TINY_LLAMA.layers);
    const tokens = file.metadata.get("tokenizer.ggml.tokens") as string[];
    expect(tokens).toHaveLength(TINY_LLAMA.vocabulary);
    expect(tokens.slice(0, 4)).toEqual(["<unk>", "<s>", "</s>", "<0x00>"]);
    expect(tokens.at(-1)).toBe("<0xFF>");
    expect(file.metadata.get("tokenizer.chat_template")).toContain("<|im_start|>");
    expect(file.tensors.map((t) => t.name)).toContain("blk.1.ffn_down.weight");
    expect(file.tensors).toHaveLength(3 + 9 * TINY_LLAMA.layers);
  });

  it("writes the same bytes for the same seed, other weights for another", () => {
    expect(
      Buffer.from(tinyLlamaGguf({ seed: 3 })).equals(Buffer.from(tinyLlamaGguf({ seed: 3 }))),
    ).toBe(true);
    expect(
      Buffer.from(tinyLlamaGguf({ seed: 3 })).equals(Buffer.from(tinyLlamaGguf({ seed: 4 }))),
    ).toBe(false);
  });
});

describe("llama-server location", () => {
  it("is cached by the same node-llama-cpp version the build script pins", () => {
    const script = readFileSync(`${repoRoot()}/${LLAMA_SERVER_SCRIPT}`, "utf8");
    expect(script).toContain(`NODE_LLAMA_CPP_VERSION=${NODE_LLAMA_CPP_VERSION}\n`);
    expect(llamaServerPath({ HOME: "/home/u" })).toBe(
      `/home/u/.cache/zml/llama-server/${NODE_LLAMA_CPP_VERSION}/llama-server`,
    );
    expect(llamaServerPath({ HOME: "/home/u", XDG_CACHE_HOME: "/c" })).toBe(
      `/c/zml/llama-server/${NODE_LLAMA_CPP_VERSION}/llama-server`,
    );
  });
});
