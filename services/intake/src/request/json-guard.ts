// Checks on a JSON body's text that JSON.parse does not make: the bytes are UTF-8, and no
// object repeats a key. JSON.parse keeps the last duplicate while other parsers (the node's,
// a client's audit log) may keep the first, so a body with `"model"` twice could be routed as
// one model and served as another; it is refused instead of guessed at.
import { isUtf8 } from "node:buffer";

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;

/** True when `raw` is well-formed UTF-8 (overlong forms and lone surrogates are not). */
export function isValidUtf8(raw: Uint8Array): boolean {
  return isUtf8(raw);
}

type Frame =
  | { kind: "object"; keys: Set<string>; expectKey: boolean; key: string | undefined }
  | { kind: "array"; index: number };

/** Index of the quote closing the string that opens at `start`. */
function stringEnd(text: string, start: number): number {
  let end = text.indexOf('"', start + 1);
  for (;;) {
    let backslashes = 0;
    while (text.charCodeAt(end - 1 - backslashes) === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return end;
    end = text.indexOf('"', end + 1);
  }
}

function pathOf(stack: Frame[], last: string): string {
  const parts = stack.slice(0, -1).map((f) => (f.kind === "object" ? f.key : String(f.index)));
  return [...parts, last].join(".");
}

/**
 * The dotted path of the first repeated key in any object of `text`, or undefined. `text` must
 * already be valid JSON (parse it first): the scan only tracks structure, and skips over string
 * contents with `indexOf`, so a large prompt costs little.
 */
export function findDuplicateKey(text: string): string | undefined {
  const stack: Frame[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const end = stringEnd(text, i);
      const top = stack.at(-1);
      if (top?.kind === "object" && top.expectKey) {
        const literal = text.slice(i, end + 1);
        // Escapes (`"mod\u0065l"`) name the same key as their decoded form.
        const key = literal.includes("\\") ? (JSON.parse(literal) as string) : literal.slice(1, -1);
        if (top.keys.has(key)) return pathOf(stack, key);
        top.keys.add(key);
        top.key = key;
        top.expectKey = false;
      }
      i = end;
    } else if (c === OPEN_OBJECT) {
      stack.push({ kind: "object", keys: new Set(), expectKey: true, key: undefined });
    } else if (c === OPEN_ARRAY) {
      stack.push({ kind: "array", index: 0 });
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      stack.pop();
    } else if (c === COMMA) {
      const top = stack.at(-1);
      if (top?.kind === "object") top.expectKey = true;
      else if (top) top.index++;
    }
  }
  return undefined;
}
