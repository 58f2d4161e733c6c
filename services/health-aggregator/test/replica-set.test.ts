import { describe, expect, it } from "vitest";
import { createReplicaSet } from "../src/replica-set.ts";

const TTL = 1_000;

describe("replica set", () => {
  it("always counts itself as live", () => {
    const set = createReplicaSet("me", TTL);
    expect(set.live(0)).toEqual(["me"]);
    expect(set.live(1e12)).toEqual(["me"]);
  });

  it("counts a replica live for the TTL after it was last heard of", () => {
    const set = createReplicaSet("me", TTL);
    set.heard("peer", 100);
    expect(set.live(100 + TTL - 1)).toEqual(["me", "peer"]);
    expect(set.live(100 + TTL)).toEqual(["me"]);
    set.heard("peer", 100 + TTL + 5);
    expect(set.live(100 + TTL + 5)).toEqual(["me", "peer"]);
  });

  it("never moves a replica's last heartbeat back in time", () => {
    const set = createReplicaSet("me", TTL);
    set.heard("peer", 500);
    set.heard("peer", 10);
    expect(set.live(500 + TTL - 1)).toContain("peer");
  });

  it("drops a replica that said goodbye at once", () => {
    const set = createReplicaSet("me", TTL);
    set.heard("peer", 0);
    set.forget("peer");
    expect(set.live(1)).toEqual(["me"]);
  });

  it("keeps known replicas alive across a period in which it could hear nobody", () => {
    const set = createReplicaSet("me", TTL);
    set.heard("peer", 0);
    set.refreshAll(5 * TTL);
    expect(set.live(5 * TTL + TTL - 1)).toEqual(["me", "peer"]);
  });

  it("reports long-silent replicas, never itself, as garbage", () => {
    const set = createReplicaSet("me", TTL);
    set.heard("me", 0);
    set.heard("old", 0);
    set.heard("recent", 2 * TTL);
    expect(set.silent(3 * TTL, 3 * TTL)).toEqual(["old"]);
  });
});
