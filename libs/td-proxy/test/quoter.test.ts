// The configfs-tsm quoter against a stand-in for the kernel's TSM report interface
// (Documentation/ABI/testing/configfs-tsm): an entry per `mkdir`, `outblob` computed from
// `inblob` when read (here: a test quote for exactly the bytes written), `generation`
// counting the writes, `rmdir` removing the entry.
import { join } from "node:path";
import { createReportDataQuoter } from "@zml/node-sim";
import { parseQuote } from "@zml/tdx";
import { createTestTee, TEST_MRTD } from "@zml/tdx/testing";
import { describe, expect, it } from "vitest";
import { configfsTsmQuoter, QuoteUnavailableError } from "../src/index.ts";
import type { TsmFileSystem } from "../src/index.ts";

const sign = createReportDataQuoter({ signer: createTestTee().signer, mrtd: TEST_MRTD });
const ROOT = "/sys/kernel/config/tsm/report";

function fakeKernel(options: { provider?: string; otherWriter?: boolean } = {}) {
  const entries = new Map<string, { inblob?: Buffer; writes: number }>();
  const entryOf = (path: string) => {
    const entry = entries.get(join(path, ".."));
    if (!entry) throw Object.assign(new Error(`ENOENT ${path}`), { code: "ENOENT" });
    return entry;
  };
  // Promise-returning on purpose, as node:fs/promises is; the work itself is synchronous.
  /* eslint-disable @typescript-eslint/require-await */
  const files: TsmFileSystem = {
    mkdir: async (path) => {
      if (!path.startsWith(`${ROOT}/`))
        throw Object.assign(new Error("ENOENT"), { code: "ENOENT" });
      entries.set(path, { writes: 0 });
    },
    writeFile: async (path, data) => {
      const entry = entryOf(path);
      entry.inblob = Buffer.from(data);
      entry.writes += options.otherWriter ? 2 : 1;
    },
    readFile: async (path) => {
      const entry = entryOf(path);
      const file = path.slice(path.lastIndexOf("/") + 1);
      if (file === "provider") return Buffer.from(`${options.provider ?? "tdx_guest"}\n`);
      if (file === "generation") return Buffer.from(`${entry.writes}\n`);
      if (file === "outblob")
        return Buffer.from(sign(entry.inblob!.toString("hex")).quote_b64, "base64");
      throw Object.assign(new Error(`ENOENT ${path}`), { code: "ENOENT" });
    },
    rmdir: async (path) => {
      entries.delete(path);
    },
  };
  /* eslint-enable @typescript-eslint/require-await */
  return { files, entries };
}

describe("configfs-tsm quoter", () => {
  it("writes REPORTDATA to inblob, returns outblob, removes its entry", async () => {
    const kernel = fakeKernel();
    const reportData = "cd".repeat(64);
    const answer = await configfsTsmQuoter(ROOT, kernel.files).quote(reportData);
    expect(parseQuote(answer.quote_b64).body.reportdata).toBe(reportData);
    expect(kernel.entries.size).toBe(0);
  });

  it("refuses another provider, and a report someone else wrote to as well", async () => {
    const sev = fakeKernel({ provider: "sev_guest" });
    await expect(configfsTsmQuoter(ROOT, sev.files).quote("cd".repeat(64))).rejects.toThrow(
      /sev_guest/,
    );
    expect(sev.entries.size).toBe(0);
    const raced = fakeKernel({ otherWriter: true });
    await expect(configfsTsmQuoter(ROOT, raced.files).quote("cd".repeat(64))).rejects.toThrow(
      /someone else/,
    );
  });

  it("says why when there is no TSM interface", async () => {
    const quoter = configfsTsmQuoter("/nonexistent/tsm/report");
    await expect(quoter.quote("cd".repeat(64))).rejects.toBeInstanceOf(QuoteUnavailableError);
  });
});
