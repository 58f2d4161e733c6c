// Reads the RFC 9180 Appendix A vectors kept in fixtures/ (the suites the channel uses).
import { readFileSync } from "node:fs";

export interface Encryption {
  seq: number;
  pt: string;
  aad: string;
  nonce: string;
  ct: string;
}

export interface Export {
  context: string;
  length: number;
  value: string;
}

export interface SuiteVectors {
  aeadId: number;
  setup: Record<string, string>;
  encryptions: Encryption[];
  exports: Export[];
}

/** One `key: value` list per `~~~` block; a value may run on over the following lines. */
function blocks(text: string): Array<Array<[string, string]>> {
  const out: Array<Array<[string, string]>> = [];
  let current: Array<[string, string]> | undefined;
  for (const line of text.split("\n")) {
    if (line.trim() === "~~~") {
      if (current) out.push(current);
      current = current ? undefined : [];
      continue;
    }
    if (!current) continue;
    const field = /^([A-Za-z_ ]+[A-Za-z0-9_]*):\s*(.*)$/.exec(line);
    if (field) current.push([field[1]!, field[2]!.trim()]);
    else if (line.trim() !== "" && current.length > 0)
      current[current.length - 1]![1] += line.trim();
  }
  return out;
}

function records(pairs: Array<[string, string]>, first: string): Array<Record<string, string>> {
  const out: Array<Record<string, string>> = [];
  for (const [key, value] of pairs) {
    if (key === first) out.push({});
    out[out.length - 1]![key] = value;
  }
  return out;
}

export function loadVectors(): SuiteVectors[] {
  const text = readFileSync(new URL("./fixtures/rfc9180-x25519-base.txt", import.meta.url), "utf8");
  const b = blocks(text);
  const suites: SuiteVectors[] = [];
  for (let i = 0; i + 2 < b.length; i += 3) {
    const setup = Object.fromEntries(b[i]!);
    suites.push({
      aeadId: Number(setup["aead_id"]),
      setup,
      encryptions: records(b[i + 1]!, "sequence number").map((r) => ({
        seq: Number(r["sequence number"]),
        pt: r["pt"]!,
        aad: r["aad"]!,
        nonce: r["nonce"]!,
        ct: r["ct"]!,
      })),
      exports: records(b[i + 2]!, "exporter_context").map((r) => ({
        context: r["exporter_context"] ?? "",
        length: Number(r["L"]),
        value: r["exported_value"]!,
      })),
    });
  }
  return suites;
}
