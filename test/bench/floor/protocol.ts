// The floor's bus protocol: the benchmark's lean build of ZML's own shape (an HTTP process,
// the secured bus, a worker that calls the node). Nothing here is ZML's code: it is the least
// that shape needs, so that the bench can say how far ZML is from what its shape allows.
import type { BusPermissions } from "@zml/bus-auth";
import { inboxPrefixOf } from "@zml/contracts";

export const FLOOR_INTAKE = "floor-intake";
export const FLOOR_WORKER = "floor-worker";

/** `floor.request.<node index>`: the request body as the payload, the reply inbox its own. */
export const FLOOR_REQUEST_PREFIX = "floor.request";

/**
 * The answer's first message carries these headers (a later one none): the node's status,
 * its content type, and `e` when this one message is the whole answer. A streamed answer
 * follows with one message per chunk the node wrote and ends with an empty message.
 */
export const FLOOR_HEADER = { status: "s", type: "t", whole: "e" } as const;

/** Least privilege, as ZML's services have it: each side may do only its own part. */
export const FLOOR_IDENTITIES: Record<string, BusPermissions> = {
  [FLOOR_INTAKE]: {
    publish: [`${FLOOR_REQUEST_PREFIX}.*`],
    subscribe: [`${inboxPrefixOf(FLOOR_INTAKE)}.>`],
    allowResponses: false,
  },
  [FLOOR_WORKER]: {
    publish: [`${inboxPrefixOf(FLOOR_INTAKE)}.>`],
    subscribe: [`${FLOOR_REQUEST_PREFIX}.*`],
    allowResponses: false,
  },
};

/** The path the floor's intake serves node `index`'s chat completions on. */
export const floorPath = (index: number) => `/n/${index}/v1/chat/completions`;
