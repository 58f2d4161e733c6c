/**
 * The TD proxy: runs inside a tier 3/4 TD in front of vLLM or TGI on loopback. It makes the
 * node's TLS key and tier-4 session keys in the TD's memory, serves quotes binding them
 * (configfs-tsm on a TDX guest, the simulator's test quoting elsewhere), opens sealed requests
 * and seals the answers (`docs/sealed-channel.md`).
 */
export { startTdProxy } from "./td-proxy.ts";
export type { TdProxy, TdProxyOptions } from "./td-proxy.ts";
export {
  configfsTsmQuoter,
  simulatedQuoter,
  CONFIGFS_TSM_REPORT_DIR,
  QuoteUnavailableError,
} from "./quoter.ts";
export type { Quoter, TsmFileSystem } from "./quoter.ts";
export type { TdProxyLogger, TdProxyStats } from "./types.ts";
