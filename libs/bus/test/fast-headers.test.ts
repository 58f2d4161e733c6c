import { headers as clientHeaders, Match, MsgHdrsImpl } from "@nats-io/nats-core";
import { describe, expect, it } from "vitest";
import { createHeaders, headerOf } from "../src/index.ts";

// The same operations on the client's headers and on ours must leave the same headers.
function both(apply: (h: ReturnType<typeof createHeaders>) => void) {
  const ours = createHeaders();
  const theirs = clientHeaders();
  apply(ours);
  apply(theirs);
  return { ours, theirs };
}

describe("createHeaders", () => {
  it("sets, appends, reads, deletes and encodes exactly as the client's headers do", () => {
    const { ours, theirs } = both((h) => {
      h.set("Zml-Model", "  llama-3 ");
      h.set("Zml-Model", "llama-3b");
      h.append("Zml-Fallback", "a");
      h.append("Zml-Fallback", "b");
      h.set("zml-tier", "2");
      h.set("Drop-Me", "x");
      h.delete("Drop-Me");
    });
    expect(new TextDecoder().decode((ours as MsgHdrsImpl).encode())).toBe(
      new TextDecoder().decode((theirs as MsgHdrsImpl).encode()),
    );
    for (const name of ["Zml-Model", "Zml-Fallback", "zml-tier", "Zml-Tier", "Drop-Me", "none"]) {
      expect(ours.get(name)).toBe(theirs.get(name));
      expect(ours.has(name)).toBe(theirs.has(name));
      expect(ours.values(name)).toEqual(theirs.values(name));
    }
    expect(ours.get("ZML-TIER", Match.IgnoreCase)).toBe("2");
    expect(ours.keys()).toEqual(theirs.keys());
  });

  it("refuses bad names and values with the client's errors", () => {
    expect(() => createHeaders().set("bad:name", "v")).toThrow(/not a valid character/);
    expect(() => createHeaders().set("Ok", "two\r\nlines")).toThrow(/cannot contain/);
    expect(() => clientHeaders().set("Ok", "two\r\nlines")).toThrow(/cannot contain/);
  });
});

describe("headerOf", () => {
  it("reads decoded wire headers like get, and is empty for absent ones", () => {
    const sent = createHeaders();
    sent.set("Zml-Seq", "3");
    sent.append("Zml-Kind", "chunk");
    sent.append("Zml-Kind", "second");
    const received = MsgHdrsImpl.decode((sent as MsgHdrsImpl).encode());
    expect(headerOf(received, "Zml-Seq")).toBe("3");
    expect(headerOf(received, "Zml-Kind")).toBe(received.get("Zml-Kind"));
    expect(headerOf(received, "zml-seq")).toBe(received.get("zml-seq"));
    expect(headerOf(received, "Absent")).toBe("");
    expect(headerOf(undefined, "Zml-Seq")).toBe("");
  });
});
