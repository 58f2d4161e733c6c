export { parseFleetDocument, loadFleetFile, FleetDocumentError } from "./parse.ts";
export { applyFleet, planFleetChanges } from "./apply.ts";
export type { FleetChange } from "./apply.ts";
