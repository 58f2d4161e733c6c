export { parseFleetDocument, loadFleetFile, FleetDocumentError, formatProblem } from "./parse.ts";
export type { FleetProblem } from "./parse.ts";
export { applyFleet, planFleetChanges } from "./apply.ts";
export type { FleetChange } from "./apply.ts";
