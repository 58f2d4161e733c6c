// Intake's public surface: the app built from injected parts, the started gateway, its
// configuration and its OpenAPI document. `main.ts` is the process; everything else in
// `src/` is internal.
export { buildApp, startIntake } from "./app.ts";
export type { AppSurface, Intake, IntakeDeps, StartIntakeDeps } from "./app.ts";
export { loadConfig } from "./config.ts";
export type { IntakeConfig } from "./config.ts";
export { buildOpenApiDocument } from "./openapi/document.ts";
