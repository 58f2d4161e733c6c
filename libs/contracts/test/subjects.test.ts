import { describe, expect, it } from "vitest";
import {
  InvalidSubjectTokenError,
  NODE_OBSERVATION_ALL,
  NODE_STATE_ALL,
  nodeObservationSubject,
  nodeStateSubject,
} from "../src/index.ts";

describe("subject builders", () => {
  it("build per-node subjects under their wildcard", () => {
    expect(nodeStateSubject("h100-a")).toBe("zml.node.state.h100-a");
    expect(nodeObservationSubject("mi300x_2")).toBe("zml.node.observation.mi300x_2");
    expect(NODE_STATE_ALL).toBe("zml.node.state.*");
    expect(NODE_OBSERVATION_ALL).toBe("zml.node.observation.*");
  });

  it.each(["", "a.b", "a*", "a>", "a b", "-lead", "x".repeat(65), "é"])(
    "rejects %j as a node id, so it can never widen a subscription",
    (bad) => {
      expect(() => nodeStateSubject(bad)).toThrow(InvalidSubjectTokenError);
      expect(() => nodeObservationSubject(bad)).toThrow(InvalidSubjectTokenError);
    },
  );
});
