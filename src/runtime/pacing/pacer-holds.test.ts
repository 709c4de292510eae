/** A pacer's hold on the gate's concurrency units: renewed while its requests are out, given back when it closes. */
import { describe, expect, it, vi } from "vitest";
import { HOLDER_TTL_MS } from "./units";
import { Pacer, type GateClient } from "./pacer";
import type { PacingPolicy } from "./policy";
import { fakeGate } from "./fake-gate.fixture";

describe("A pacer with every unit busy", () => {
  it("renews its hold on the units while its requests outlast the gate's lease of them, so no other caller is given them", async () => {
    vi.useFakeTimers({ now: 0, toFake: ["setTimeout", "clearTimeout", "Date"] });
    try {
      const policy: PacingPolicy = { requestsPerSecond: 100, concurrency: 8, batchParallelism: 1 };
      const { gate, ledger } = fakeGate(policy);
      const slow = new Pacer({ gate, caller: "slow", policy, now: Date.now, log: () => {} });
      const signal = new AbortController().signal;
      const held = Promise.all(Array.from({ length: 6 }, () => slow.slot(signal)));
      await vi.advanceTimersByTimeAsync(100);
      const slots = await held;
      // Its six requests take far longer than the gate holds units for an acquire.
      await vi.advanceTimersByTimeAsync(HOLDER_TTL_MS * 3);
      expect(ledger.snapshot(policy, Date.now()).unitsHeld).toBe(6);
      const other = new Pacer({ gate, caller: "other", policy, now: Date.now, log: () => {} });
      let started = 0;
      const others = Array.from({ length: 4 }, () => other.slot(signal).then((slot) => (started++, slot)));
      await vi.advanceTimersByTimeAsync(1000);
      expect(started).toBe(2);
      for (const slot of slots) slot.release();
      await vi.advanceTimersByTimeAsync(2000);
      expect(started).toBe(4);
      for (const slot of await Promise.all(others)) slot.release();
      await Promise.all([slow.close(), other.close()]);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("A pacer whose gate failed a renewal", () => {
  it("renews again while its requests are out, so their units do not lapse to other callers", async () => {
    vi.useFakeTimers({ now: 0, toFake: ["setTimeout", "clearTimeout", "Date"] });
    try {
      const policy: PacingPolicy = { requestsPerSecond: 100, concurrency: 8, batchParallelism: 1 };
      const { gate, ledger } = fakeGate(policy);
      let failNext = false;
      const flaky: GateClient = {
        ...gate,
        acquire: async (r) => {
          if (failNext) {
            failNext = false;
            throw new Error("the gate's object was being reset");
          }
          return gate.acquire(r);
        },
      };
      const slow = new Pacer({ gate: flaky, caller: "slow", policy, now: Date.now, log: () => {} });
      const signal = new AbortController().signal;
      const held = Promise.all(Array.from({ length: 6 }, () => slow.slot(signal)));
      await vi.advanceTimersByTimeAsync(100);
      const slots = await held;
      // Its first renewal fails; its six requests go on far longer than the gate holds units without one.
      failNext = true;
      await vi.advanceTimersByTimeAsync(HOLDER_TTL_MS * 3);
      expect(ledger.snapshot(policy, Date.now()).unitsHeld).toBe(6);
      for (const slot of slots) slot.release();
      await slow.close();
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("A pacer the gate gave no units", () => {
  it("still tells the gate it is gone when it closes, so it is not counted among the starved holders", async () => {
    const policy: PacingPolicy = { requestsPerSecond: null, concurrency: 2, batchParallelism: 1 };
    const { gate, calls, ledger } = fakeGate(policy);
    ledger.acquire(policy, { caller: "busy", slots: 2, inFlight: 2, units: 2, now: Date.now() });
    const starved = new Pacer({ gate, caller: "starved", policy, now: Date.now, log: () => {} });
    const controller = new AbortController();
    const waiting = starved.slot(controller.signal).catch(() => null);
    await new Promise((r) => setTimeout(r, 20));
    expect(calls.acquire).toBeGreaterThan(0);
    controller.abort(new Error("the attempt stopped"));
    await waiting;
    await starved.close();
    expect(calls.release).toBe(1);
  });
});
