import { describe, expect, it } from "vitest";
import { createConcurrencyGate } from "../src/concurrency-gate.ts";
import type { Lease } from "../src/concurrency-gate.ts";

describe("concurrency gate", () => {
  it("runs up to the limit and admits waiters in arrival order", () => {
    const gate = createConcurrencyGate(2);
    const started: number[] = [];
    const leases: Lease[] = [];
    for (let i = 0; i < 5; i++) leases.push(gate.enter(() => started.push(i)));
    expect(started).toEqual([0, 1]);
    expect([gate.running, gate.waiting]).toEqual([2, 3]);

    leases[1]!.release();
    expect(started).toEqual([0, 1, 2]);
    leases[1]!.release(); // a second release changes nothing
    expect([gate.running, gate.waiting]).toEqual([2, 2]);

    leases[3]!.release(); // leaves the queue without running
    leases[0]!.release();
    expect(started).toEqual([0, 1, 2, 4]);
    expect([gate.running, gate.waiting]).toEqual([2, 0]);
  });

  it("follows limit changes", () => {
    const gate = createConcurrencyGate(1);
    const started: number[] = [];
    const leases = [0, 1, 2, 3].map((i) => gate.enter(() => started.push(i)));
    gate.setLimit(3);
    expect(started).toEqual([0, 1, 2]);
    gate.setLimit(1);
    leases[0]!.release();
    leases[1]!.release();
    expect(started).toEqual([0, 1, 2]);
    leases[2]!.release();
    expect(started).toEqual([0, 1, 2, 3]);
  });

  it("admits many synchronous finishers without growing the stack", () => {
    const gate = createConcurrencyGate(1);
    const leases: Lease[] = [];
    let started = 0;
    const blocker = gate.enter(() => {});
    for (let i = 0; i < 50_000; i++) {
      leases.push(
        gate.enter(() => {
          started += 1;
          leases[i]?.release();
        }),
      );
    }
    // Each waiter, once admitted, releases itself at once; the release happens inside
    // admit(), which must not recurse into the next waiter.
    blocker.release();
    expect(started).toBe(50_000);
    expect([gate.running, gate.waiting]).toEqual([0, 0]);
  });

  it("keeps FIFO order when most waiters give up", () => {
    const gate = createConcurrencyGate(1);
    const blocker = gate.enter(() => {});
    const started: number[] = [];
    const leases = Array.from({ length: 3000 }, (_, i) => gate.enter(() => started.push(i)));
    for (let i = 0; i < 3000; i++) if (i % 3 !== 0) leases[i]!.release();
    expect(gate.waiting).toBe(1000);
    blocker.release();
    for (let n = 0; n < 1000; n++) leases[started.at(-1)!]!.release();
    expect(started).toEqual(Array.from({ length: 1000 }, (_, k) => k * 3));
    expect([gate.running, gate.waiting]).toEqual([0, 0]);
  });

  it("clear drops waiters", () => {
    const gate = createConcurrencyGate(1);
    const started: number[] = [];
    const first = gate.enter(() => started.push(0));
    gate.enter(() => started.push(1));
    gate.clear();
    first.release();
    expect(started).toEqual([0]);
    expect(gate.waiting).toBe(0);
  });
});
