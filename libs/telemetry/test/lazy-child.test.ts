import { describe, expect, it, vi } from "vitest";
import { createLogger, lazyChild, REDACTED } from "../src/index.ts";
import { captureStream } from "./capture.ts";

describe("lazyChild", () => {
  it("writes lines with the child's bindings, redacted like the parent's", () => {
    const out = captureStream();
    const log = createLogger({ service: "dispatcher", level: "info", destination: out });
    const child = lazyChild(log, { request_id: "r-1", authorization: "Bearer sk-secret" });
    child.info({ node: "n1" }, "routed");
    child.warn("slow");
    expect(out.lines()).toMatchObject([
      { request_id: "r-1", authorization: REDACTED, node: "n1", msg: "routed", level: "info" },
      { request_id: "r-1", msg: "slow", level: "warn" },
    ]);
    expect(out.text()).not.toContain("sk-secret");
  });

  it("builds no pino child while every call is below the level", () => {
    const out = captureStream();
    const log = createLogger({ service: "dispatcher", level: "warn", destination: out });
    const spy = vi.spyOn(log, "child");
    const child = lazyChild(log, { request_id: "r-2" });
    child.info("ignored");
    child.debug({ a: 1 }, "ignored too");
    expect(child.isLevelEnabled("info")).toBe(false);
    expect(child.level).toBe("warn");
    expect(spy).not.toHaveBeenCalled();
    child.error("failed");
    child.error("again");
    expect(spy).toHaveBeenCalledTimes(1);
    expect(out.lines()).toMatchObject([
      { request_id: "r-2", msg: "failed" },
      { request_id: "r-2", msg: "again" },
    ]);
  });

  it("offers child() with both sets of bindings", () => {
    const out = captureStream();
    const log = createLogger({ service: "intake", destination: out });
    lazyChild(log, { request_id: "r-3" }).child({ decision_id: "d-3" }).info("x");
    expect(out.lines()[0]).toMatchObject({ request_id: "r-3", decision_id: "d-3" });
  });
});
