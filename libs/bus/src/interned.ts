/**
 * One instance per distinct string, for strings that are compared on every frame. Two equal
 * strings that are different objects (each request's copy of a subject or a replica's name,
 * cut out of its own headers) compare byte by byte, and V8 compares a string cut out of a
 * larger one (a sliced string) in its runtime, outside compiled code; the same object compares
 * at once. A string is looked up once (a request's first use), then compared as the one
 * instance.
 *
 * At most `max` strings are kept; past that the table starts again, so a process that sees
 * ever new values (replicas restarting for months) holds a bounded number. A string returned
 * before that is still correct, only no longer the shared instance.
 */
export function createInterner(max = 256): (value: string) => string {
  let table = new Map<string, string>();
  return (value) => {
    const known = table.get(value);
    if (known !== undefined) return known;
    if (table.size >= max) table = new Map();
    table.set(value, value);
    return value;
  };
}
