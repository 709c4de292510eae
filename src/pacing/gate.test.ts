import { describe, expect, it } from "vitest";
import { CONCURRENCY_RETRY_MS, DECLARED_RATE_DECREASE, GateLedger, MIN_RATE_FACTOR, RATE_DECREASE, SLOT_HORIZON_MS, UNPACED_LEASE_MS } from "./gate";
import { PACE_UTILIZATION, type PacingPolicy } from "./policy";

const policy = (p: Partial<PacingPolicy> = {}): PacingPolicy => ({ requestsPerSecond: null, concurrency: null, batchParallelism: 4, ...p });

/** Absolute start times of a grant. */
const starts = (now: number, grant: { startInMs: number[] }) => grant.startInMs.map((o) => now + o);

describe("GateLedger: rate", () => {
  it("spaces slots one interval apart across callers, at the utilization share of the declared rate", () => {
    const gate = new GateLedger();
    const p = policy({ requestsPerSecond: 10 });
    const interval = 1000 / (10 * PACE_UTILIZATION);
    const a = starts(0, gate.acquire(p, { caller: "a", slots: 3, inFlight: 0, now: 0 }));
    const b = starts(5, gate.acquire(p, { caller: "b", slots: 3, inFlight: 0, now: 5 }));
    const all = [...a, ...b];
    expect(all[0]).toBe(0);
    for (let i = 1; i < all.length; i++) expect(all[i]! - all[i - 1]!).toBeCloseTo(interval, 6);
  });

  it("never hands out more than the provider's limit in any second, however callers interleave", () => {
    const gate = new GateLedger();
    const p = policy({ requestsPerSecond: 20 });
    const granted: number[] = [];
    for (let now = 0; now < 5000; now += 37) {
      for (const caller of ["a", "b", "c"]) granted.push(...starts(now, gate.acquire(p, { caller, slots: 4, inFlight: 0, now })));
    }
    granted.sort((x, y) => x - y);
    // Over the whole run the rate is the utilization share of the limit.
    expect(granted.length / ((granted.at(-1)! - granted[0]!) / 1000)).toBeCloseTo(20 * PACE_UTILIZATION, 0);
    let most = 0;
    for (let i = 0; i < granted.length; i++) {
      const inWindow = granted.filter((t) => t >= granted[i]! && t < granted[i]! + 1000).length;
      expect(inWindow).toBeLessThanOrEqual(20);
      most = Math.max(most, inWindow);
    }
    // The gate reports the same bound (tests of whole runs read it over HTTP).
    expect(gate.snapshot(p, 5000)).toMatchObject({ slotsGranted: granted.length, maxSlotsPerSecond: most });
  });

  it("grants at most one horizon ahead and says when to ask again", () => {
    const gate = new GateLedger();
    const p = policy({ requestsPerSecond: 5 });
    const first = gate.acquire(p, { caller: "a", slots: 100, inFlight: 0, now: 0 });
    expect(first.startInMs.at(-1)!).toBeLessThanOrEqual(SLOT_HORIZON_MS);
    const second = gate.acquire(p, { caller: "a", slots: 1, inFlight: 0, now: 0 });
    expect(second.startInMs).toEqual([]);
    expect(second.retryInMs).toBeGreaterThan(0);
  });

  it("grants every slot at once without a declared rate, and lets the caller go unpaced for a while", () => {
    const gate = new GateLedger();
    const grant = gate.acquire(policy(), { caller: "a", slots: 50, inFlight: 0, now: 100 });
    expect(grant.startInMs).toEqual(Array(50).fill(0));
    expect(grant.unpacedForMs).toBe(UNPACED_LEASE_MS);
    expect(gate.acquire(policy({ requestsPerSecond: 5 }), { caller: "a", slots: 1, inFlight: 0, now: 100 }).unpacedForMs).toBe(0);
    gate.report(policy(), { retryAfterMs: 500, now: 200 });
    expect(gate.acquire(policy(), { caller: "a", slots: 1, inFlight: 0, now: 300 }).unpacedForMs).toBe(0);
  });
});

describe("GateLedger: backpressure", () => {
  it("pauses every caller until the Retry-After and lowers the rate once per second", () => {
    const gate = new GateLedger();
    const p = policy({ requestsPerSecond: 10 });
    gate.acquire(p, { caller: "a", slots: 1, inFlight: 0, now: 0 });
    gate.report(p, { retryAfterMs: 400, now: 100 });
    gate.report(p, { retryAfterMs: 400, now: 150 });
    expect(gate.snapshot(p, 150).rateFactor).toBeCloseTo(DECLARED_RATE_DECREASE, 6);
    const other = gate.acquire(p, { caller: "b", slots: 2, inFlight: 0, now: 200 });
    expect(starts(200, other)[0]).toBeGreaterThanOrEqual(550);
    const interval = 1000 / (10 * PACE_UTILIZATION * DECLARED_RATE_DECREASE);
    expect(other.startInMs[1]! - other.startInMs[0]!).toBeGreaterThanOrEqual(interval - 1);
  });

  it("recovers the rate while no 429 arrives, and never drops below the floor", () => {
    const gate = new GateLedger();
    const p = policy({ requestsPerSecond: 10 });
    for (let i = 0; i < 20; i++) gate.report(p, { retryAfterMs: 0, now: i * 2000 });
    expect(gate.snapshot(p, 40_000).rateFactor).toBeGreaterThanOrEqual(MIN_RATE_FACTOR);
    gate.acquire(p, { caller: "a", slots: 0, inFlight: 0, now: 200_000 });
    expect(gate.snapshot(p, 200_000).rateFactor).toBe(1);
  });

  it("learns a rate for a provider that declares none", () => {
    const gate = new GateLedger();
    const p = policy();
    gate.acquire(p, { caller: "a", slots: 40, inFlight: 0, now: 0 });
    gate.report(p, { retryAfterMs: 100, now: 10 });
    const learned = gate.snapshot(p, 10).learnedRequestsPerSecond!;
    expect(learned).toBeCloseTo(40 * RATE_DECREASE, 6);
    const next = gate.acquire(p, { caller: "b", slots: 3, inFlight: 0, now: 20 });
    expect(next.startInMs[0]).toBeGreaterThanOrEqual(90);
    expect(next.startInMs[2]! - next.startInMs[1]!).toBeCloseTo(1000 / learned, 6);
  });
});

describe("GateLedger: concurrency", () => {
  it("never lets the units held sum past the limit", () => {
    const gate = new GateLedger();
    const p = policy({ concurrency: 10 });
    const a = gate.acquire(p, { caller: "a", slots: 8, inFlight: 0, now: 0 });
    const b = gate.acquire(p, { caller: "b", slots: 8, inFlight: 0, now: 0 });
    expect(a.units! + b.units!).toBeLessThanOrEqual(10);
    expect(b.startInMs.length).toBe(b.units);
  });

  it("tells a caller without units to ask again soon, and trims the others to a fair share as they renew", () => {
    const gate = new GateLedger();
    const p = policy({ concurrency: 10 });
    gate.acquire(p, { caller: "a", slots: 10, inFlight: 0, now: 0 });
    const starved = gate.acquire(p, { caller: "b", slots: 5, inFlight: 0, now: 1 });
    expect(starved.units).toBe(0);
    expect(starved.retryInMs).toBe(CONCURRENCY_RETRY_MS);
    const renewed = gate.acquire(p, { caller: "a", slots: 10, inFlight: 3, now: 2 });
    expect(renewed.units).toBe(5);
    expect(gate.acquire(p, { caller: "b", slots: 5, inFlight: 0, now: 3 }).units).toBe(5);
  });

  it("returns a caller's units on release and when its lease lapses", () => {
    const gate = new GateLedger();
    const p = policy({ concurrency: 4 });
    gate.acquire(p, { caller: "a", slots: 4, inFlight: 0, now: 0 });
    gate.release("a");
    expect(gate.acquire(p, { caller: "b", slots: 4, inFlight: 0, now: 1 }).units).toBe(4);
    expect(gate.snapshot(p, 60_000).unitsHeld).toBe(0);
  });
});
