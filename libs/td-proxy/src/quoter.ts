// Where the TD proxy's quotes come from: the TDX guest's own quoting through Linux configfs-tsm
// on a real TD, or the simulator's test quoting (a test PCK chain, never Intel's) where there
// is no TD. The proxy's code is the same for both.
import { randomBytes } from "node:crypto";
import * as fs from "node:fs/promises";
import { join } from "node:path";
import type { NodeQuoteResponse } from "@zml/contracts";

/** A quote (and, if the platform ships it, collateral) whose REPORTDATA is the given 64 bytes. */
export interface Quoter {
  /** For logs and stats: `configfs-tsm` or `simulated`. */
  readonly kind: string;
  quote(reportDataHex: string): Promise<Pick<NodeQuoteResponse, "quote_b64" | "collateral">>;
}

/** The kernel's TSM report interface (Documentation/ABI/testing/configfs-tsm). */
export const CONFIGFS_TSM_REPORT_DIR = "/sys/kernel/config/tsm/report";

export class QuoteUnavailableError extends Error {
  constructor(message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "QuoteUnavailableError";
  }
}

/**
 * The file operations configfs-tsm is driven by. configfs computes `outblob` when it is read,
 * which no ordinary directory can do; tests pass a kernel stand-in here.
 */
export interface TsmFileSystem {
  mkdir(path: string): Promise<unknown>;
  writeFile(path: string, data: Uint8Array): Promise<void>;
  readFile(path: string): Promise<Buffer>;
  rmdir(path: string): Promise<void>;
}

/**
 * Quotes from the TDX guest driver: one report entry per quote (`mkdir`), REPORTDATA written to
 * `inblob`, the quote read from `outblob`, the entry removed. `provider` must be `tdx_guest`,
 * and `generation` must count exactly our one write: another writer on the same entry would
 * make the quote someone else's.
 */
export function configfsTsmQuoter(
  reportDir = CONFIGFS_TSM_REPORT_DIR,
  files: TsmFileSystem = fs,
): Quoter {
  return {
    kind: "configfs-tsm",
    async quote(reportDataHex) {
      const entry = join(reportDir, `zml-${randomBytes(8).toString("hex")}`);
      try {
        await files.mkdir(entry);
      } catch (error) {
        throw new QuoteUnavailableError(`cannot create a TSM report in ${reportDir}`, error);
      }
      try {
        await files.writeFile(join(entry, "inblob"), Buffer.from(reportDataHex, "hex"));
        const quote = await files.readFile(join(entry, "outblob"));
        const provider = (await files.readFile(join(entry, "provider"))).toString().trim();
        const generation = (await files.readFile(join(entry, "generation"))).toString().trim();
        if (provider !== "tdx_guest") {
          throw new QuoteUnavailableError(`TSM provider is '${provider}', not tdx_guest`);
        }
        if (generation !== "1") {
          throw new QuoteUnavailableError("the TSM report was written by someone else too");
        }
        if (quote.length === 0) throw new QuoteUnavailableError("the TSM report is empty");
        return { quote_b64: quote.toString("base64") };
      } catch (error) {
        if (error instanceof QuoteUnavailableError) throw error;
        throw new QuoteUnavailableError("the TSM report could not be read", error);
      } finally {
        await files.rmdir(entry).catch(() => undefined);
      }
    },
  };
}

/** The simulator's test quoting (`createReportDataQuoter` of `@zml/node-sim`). */
export function simulatedQuoter(
  quoteFor: (reportDataHex: string) => Pick<NodeQuoteResponse, "quote_b64" | "collateral">,
): Quoter {
  return { kind: "simulated", quote: (reportDataHex) => Promise.resolve(quoteFor(reportDataHex)) };
}
