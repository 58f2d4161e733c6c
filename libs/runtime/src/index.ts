export { parseConfig, ConfigError } from "./config.ts";
export { onShutdownSignal } from "./shutdown.ts";
export type { ShutdownLogger } from "./shutdown.ts";
