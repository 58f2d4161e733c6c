// Composition root: the shared boot (libs/runtime), then what only intake has: its TLS
// material, the admin API's own bus connection, and the HTTP listeners (which serve its
// health and metrics themselves, so there is no separate ops listener).
import { readConfigFile, bootService } from "@zml/runtime";
import { startIntake } from "./app.ts";
import { loadConfig } from "./config.ts";

/** A port in use (a system call failed) or a bad certificate or route does not heal. */
function cannotImproveByWaiting(err: unknown): boolean {
  const e = err as { syscall?: unknown; code?: unknown };
  return (
    typeof e.syscall === "string" || (typeof e.code === "string" && /^(ERR_OSSL|FST_)/.test(e.code))
  );
}

const boot = bootService("intake", process.env, loadConfig);
const { config } = boot;
const tls =
  config.ZML_TLS_CERT_FILE && config.ZML_TLS_KEY_FILE
    ? {
        cert: readConfigFile("ZML_TLS_CERT_FILE", config.ZML_TLS_CERT_FILE, "PEM certificate"),
        key: readConfigFile("ZML_TLS_KEY_FILE", config.ZML_TLS_KEY_FILE, "PEM private key"),
      }
    : undefined;
// The admin API writes configuration as `admin`, over a connection of its own.
const adminBus =
  config.ZML_ADMIN_TOKEN === undefined
    ? undefined
    : await boot.connectAs("admin", config.ZML_ADMIN_NATS_NKEY_SEED_FILE, "zml-intake-admin");
await boot.serve(
  (parts) =>
    startIntake({
      ...parts,
      // Intake serves /metrics itself, and registers its metrics after its last step that can
      // fail and be retried.
      registry: parts.servedRegistry,
      ...(adminBus ? { adminBus } : {}),
      tls,
      clock: Date.now,
    }),
  {
    isPermanent: cannotImproveByWaiting,
    readyFields: (intake) => ({
      url: intake.url,
      ...(intake.adminUrl ? { admin_url: intake.adminUrl } : {}),
      http2: tls ? "h2" : config.ZML_H2C ? "h2c" : "off",
      admin: config.ZML_ADMIN_TOKEN !== undefined,
    }),
    afterStop: async () => adminBus?.drain(),
  },
);
