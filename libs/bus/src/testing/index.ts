// Test-only parts for code that talks to the bus. Never import from production code.
export { startBusRig } from "./bus-rig.ts";
export type { BusRig, StartBusRigOptions } from "./bus-rig.ts";
