import { describe, expect, it } from "vitest";
import {
  RATE_RECHECK_MS,
  BARE_429_INTERVALS,
  BARE_429_WAIT_MS,
  BUDGET_MIN_RESET_MS,
  CONCURRENCY_RETRY_MS,
  DECLARED_HORIZON_MS,
  EMPTY_SIGNAL,
  GateLedger,
  PROBE_RETRY_MS,
  PROBE_TIMEOUT_MS,
  SLOT_HORIZON_MS,
  UNPACED_LEASE_MS,
  type GateSignal,
} from "./gate";
import { DECLARED_RATE_DECREASE, LEARN_SETTLE_MS, MIN_RATE_FACTOR, RATE_DECREASE, RESET_MEMORY_MS } from "./rate";
import { PACE_UTILIZATION, type PacingPolicy } from "./policy";

const policy = (p: Partial<PacingPolicy> = {}): PacingPolicy => ({ requestsPerSecond: null, concurrency: null, batchParallelism: 4, ...p });

/** Absolute start times of a grant. */
const starts = (now: number, grant: { startInMs: number[] }) => grant.startInMs.map((o) => now + o);

const signal = (s: Partial<GateSignal>): GateSignal => ({ ...EMPTY_SIGNAL, ...s });
/** `count` answers of 429 asking for `retryAfterMs`. */
const limited = (retryAfterMs: number, count = 1) => signal({ limited: count, retryAfterMs });

/** A gate that has heard from its provider (past the probe), saying nothing of its limit. */
function heardGate(p: PacingPolicy = policy()): GateLedger {
  const gate = new GateLedger();
  gate.report(p, { signal: signal({ probe: true }), now: 0 });
  return gate;
}

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

  it("paces by a changed declared rate from the change on: a slot far away under the old one does not hold up the new", () => {
    const gate = new GateLedger();
    // Declared at one request per 100 s by mistake: the next slot is 100 s away. The caller asks again well before
    // it (RATE_RECHECK_MS), so a correction reaches it.
    const waiting = gate.acquire(policy({ requestsPerSecond: 0.01 }), { caller: "a", slots: 2, inFlight: 0, now: 0 });
    expect(waiting).toMatchObject({ startInMs: [0], retryInMs: RATE_RECHECK_MS });
    // Corrected to 100/s a second later: the next slots come at the new pace, not after the old one's 100 s.
    const fixed = policy({ requestsPerSecond: 100 });
    const grant = gate.acquire(fixed, { caller: "a", slots: 3, inFlight: 0, now: 1_000 });
    expect(grant.startInMs).toHaveLength(3);
    expect(Math.max(...grant.startInMs)).toBeLessThan(100);
  });

  it("asks a caller the pace holds back again within RATE_RECHECK_MS, and one the provider holds back at its wait's end", () => {
    // The pace: one request per 100 s. A rate raised meanwhile must reach the caller long before its next slot.
    const slow = new GateLedger();
    const once = policy({ requestsPerSecond: 0.01 });
    expect(slow.acquire(once, { caller: "a", slots: 1, inFlight: 0, now: 0 }).startInMs).toEqual([0]);
    expect(slow.acquire(once, { caller: "a", slots: 1, inFlight: 0, now: 10 })).toMatchObject({
      startInMs: [],
      retryInMs: RATE_RECHECK_MS,
    });

    // The provider's budget: one request left until a reset a minute away. No policy lifts it: asked again at the reset.
    const spent = new GateLedger();
    const fast = policy({ requestsPerSecond: 100 });
    spent.report(fast, { signal: signal({ remaining: { requests: 1, resetMs: 60_000, ageMs: 0 } }), now: 0 });
    const budgeted = spent.acquire(fast, { caller: "a", slots: 3, inFlight: 0, now: 0 });
    expect(budgeted.startInMs).toHaveLength(1);
    expect(budgeted.retryInMs).toBeGreaterThan(50_000);

    // A 429 asking for a minute: the same.
    const paused = new GateLedger();
    paused.report(fast, { signal: signal({ limited: 1, retryAfterMs: 60_000 }), now: 0 });
    expect(paused.acquire(fast, { caller: "a", slots: 3, inFlight: 0, now: 0 }).retryInMs).toBeGreaterThan(59_000);
  });

  it("paces from a reset on by the rate then in force: a slot far away under the rate before it does not hold it up", () => {
    const gate = new GateLedger();
    gate.acquire(policy({ requestsPerSecond: 0.01 }), { caller: "a", slots: 2, inFlight: 0, now: 0 });
    // DELETE /v1/pacing/<provider> (the override forgotten), then a rate declared again.
    gate.forgetLearned();
    const grant = gate.acquire(policy({ requestsPerSecond: 50 }), { caller: "a", slots: 3, inFlight: 0, now: 1_000 });
    expect(grant.startInMs).toHaveLength(3);
    expect(Math.max(...grant.startInMs)).toBeLessThan(100);

    // A reset with the same rate declared again hands out no slot over those already leased (3 s ahead at 10/s).
    const leased = new GateLedger();
    const ten = policy({ requestsPerSecond: 10 });
    const first = starts(0, leased.acquire(ten, { caller: "a", slots: 100, inFlight: 0, now: 0 }));
    leased.forgetLearned();
    const more = starts(100, leased.acquire(ten, { caller: "b", slots: 100, inFlight: 0, now: 100 }));
    expect(Math.min(...more)).toBeGreaterThan(Math.max(...first));

    // Reset with nothing declared after it: the probe goes, and the quota its answer announces paces from it on.
    const again = heardGate();
    again.acquire(policy({ requestsPerSecond: 0.01 }), { caller: "a", slots: 2, inFlight: 0, now: 0 });
    again.forgetLearned();
    const probe = again.acquire(policy(), { caller: "a", slots: 3, inFlight: 0, now: 1_000 });
    expect(probe.startInMs).toEqual([0]);
    again.report(policy(), { signal: signal({ probe: true, quota: { requests: 100, windowMs: 1_000 } }), now: 1_050 });
    const paced = again.acquire(policy(), { caller: "a", slots: 3, inFlight: 0, now: 1_100 });
    expect(paced.startInMs).toHaveLength(3);
    expect(Math.max(...paced.startInMs)).toBeLessThan(200);
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

  it("grants at most one horizon ahead (further for a declared rate) and says when to ask again", () => {
    const gate = new GateLedger();
    const p = policy({ requestsPerSecond: 5 });
    const first = gate.acquire(p, { caller: "a", slots: 100, inFlight: 0, now: 0 });
    expect(first.startInMs.at(-1)!).toBeLessThanOrEqual(DECLARED_HORIZON_MS);
    expect(first.startInMs.at(-1)!).toBeGreaterThan(DECLARED_HORIZON_MS - 1000 / (5 * PACE_UTILIZATION));
    const second = gate.acquire(p, { caller: "a", slots: 1, inFlight: 0, now: 0 });
    expect(second.startInMs).toEqual([]);
    expect(second.retryInMs).toBeGreaterThan(0);

    // A rate announced by the provider (not declared) is leased one horizon ahead.
    const announced = heardGate();
    announced.report(policy(), { signal: signal({ quota: { requests: 5, windowMs: 1000 } }), now: 0 });
    const grant = announced.acquire(policy(), { caller: "a", slots: 100, inFlight: 0, now: 0 });
    expect(grant.startInMs.at(-1)!).toBeLessThanOrEqual(SLOT_HORIZON_MS);
    expect(announced.acquire(policy(), { caller: "a", slots: 1, inFlight: 0, now: 0 }).startInMs).toEqual([]);
  });

  it("says how far off its next free slot is: the slots leased ahead, a pause, nothing without a rate", () => {
    const gate = new GateLedger();
    const p = policy({ requestsPerSecond: 10 });
    const interval = 1000 / (10 * PACE_UTILIZATION);
    expect(gate.snapshot(p, 0).bookedForMs).toBe(0);
    gate.acquire(p, { caller: "a", slots: 6, inFlight: 0, now: 0 });
    expect(gate.snapshot(p, 0).bookedForMs).toBeCloseTo(6 * interval, 6);
    // Time passes as the slots start: less of the schedule is taken.
    expect(gate.snapshot(p, 2 * interval).bookedForMs).toBeCloseTo(4 * interval, 6);
    expect(gate.snapshot(p, 10 * interval).bookedForMs).toBe(0);
    // A pause longer than the schedule is what a new slot waits for.
    gate.report(p, { signal: limited(2_000), now: 10 * interval });
    expect(gate.snapshot(p, 10 * interval).bookedForMs).toBeCloseTo(2_000, 6);

    const unpaced = heardGate();
    unpaced.acquire(policy(), { caller: "a", slots: 50, inFlight: 0, now: 100 });
    expect(unpaced.snapshot(policy(), 100).bookedForMs).toBe(0);
  });

  it("grants every slot at once without a rate, and lets the caller go unpaced for a while", () => {
    const gate = heardGate();
    const grant = gate.acquire(policy(), { caller: "a", slots: 50, inFlight: 0, now: 100 });
    expect(grant.startInMs).toEqual(Array(50).fill(0));
    expect(grant.unpacedForMs).toBe(UNPACED_LEASE_MS);
    expect(gate.acquire(policy({ requestsPerSecond: 5 }), { caller: "a", slots: 1, inFlight: 0, now: 100 }).unpacedForMs).toBe(0);
    gate.report(policy(), { signal: limited(500), now: 200 });
    expect(gate.acquire(policy(), { caller: "a", slots: 1, inFlight: 0, now: 300 }).unpacedForMs).toBe(0);
  });
});

describe("GateLedger: first contact", () => {
  it("sends one probe to a provider it has not heard from, and holds every other request until its answer", () => {
    const gate = new GateLedger();
    const p = policy();
    const probe = gate.acquire(p, { caller: "a", slots: 30, inFlight: 0, now: 0 });
    expect(probe).toMatchObject({ startInMs: [0], probe: true, unpacedForMs: 0 });
    const held = gate.acquire(p, { caller: "b", slots: 30, inFlight: 0, now: 5 });
    expect(held).toMatchObject({ startInMs: [], retryInMs: PROBE_RETRY_MS, probe: false });
    expect(gate.acquire(p, { caller: "a", slots: 29, inFlight: 1, now: 6 }).startInMs).toEqual([]);
    // The answer announces a quota: from the first burst on, requests are paced at it.
    const announced = gate.acquire(p, {
      caller: "b",
      slots: 30,
      inFlight: 0,
      now: 60,
      signal: signal({ probe: true, quota: { requests: 10, windowMs: 1000 } }),
    });
    expect(announced.probe).toBe(false);
    expect(announced.startInMs[1]! - announced.startInMs[0]!).toBeCloseTo(1000 / (10 * PACE_UTILIZATION), 6);
    expect(gate.snapshot(p, 60)).toMatchObject({ heard: true, announcedRequestsPerSecond: 10 });
  });

  it("goes on without the probe's answer after a while, and never probes when a rate is declared", () => {
    const gate = new GateLedger();
    gate.acquire(policy(), { caller: "a", slots: 1, inFlight: 0, now: 0 });
    const after = gate.acquire(policy(), { caller: "b", slots: 5, inFlight: 0, now: PROBE_TIMEOUT_MS });
    expect(after.startInMs).toEqual(Array(5).fill(0));
    expect(
      new GateLedger().acquire(policy({ requestsPerSecond: 10 }), { caller: "a", slots: 3, inFlight: 0, now: 0 }).startInMs,
    ).toHaveLength(3);
  });
});

describe("GateLedger: the provider's own signals", () => {
  it("paces at an announced quota when no rate is declared; a declared rate wins", () => {
    const gate = new GateLedger();
    const quota = signal({ quota: { requests: 120, windowMs: 60_000 } });
    const grant = gate.acquire(policy(), { caller: "a", slots: 3, inFlight: 0, now: 0, signal: quota });
    expect(grant.startInMs[1]! - grant.startInMs[0]!).toBeCloseTo(1000 / (2 * PACE_UTILIZATION), 6);
    expect(gate.snapshot(policy({ requestsPerSecond: 20 }), 0).effectiveRequestsPerSecond).toBeCloseTo(20 * PACE_UTILIZATION, 6);
  });

  it("takes a quota that names no window over the longest reset heard", () => {
    const gate = new GateLedger();
    gate.report(policy(), {
      signal: signal({ quota: { requests: 50, windowMs: null }, remaining: { requests: 40, resetMs: 1000, ageMs: 0 } }),
      now: 0,
    });
    expect(gate.snapshot(policy(), 0).announcedRequestsPerSecond).toBe(50);
    gate.report(policy(), { signal: signal({ remaining: { requests: 30, resetMs: 10_000, ageMs: 0 } }), now: 10 });
    expect(gate.snapshot(policy(), 10).announcedRequestsPerSecond).toBe(5);
  });

  it("forgets a long reset heard once (a penalty box's minute) after a while of shorter ones", () => {
    const gate = new GateLedger();
    const heard = (resetMs: number, now: number) =>
      gate.report(policy(), {
        signal: signal({ quota: { requests: 10, windowMs: null }, remaining: { requests: 5, resetMs, ageMs: 0 } }),
        now,
      });
    heard(1_000, 0);
    heard(60_000, 1_000);
    expect(gate.snapshot(policy(), 1_000).announcedRequestsPerSecond).toBeCloseTo(10 / 60, 6);
    // Answers go on saying the window resets within a second: once the long one is past memory, it paces at 10/s again.
    for (let now = 2_000; now <= RESET_MEMORY_MS + 60_000; now += 30_000) heard(1_000, now);
    expect(gate.snapshot(policy(), RESET_MEMORY_MS + 60_000).announcedRequestsPerSecond).toBe(10);
  });

  it("pauses every caller until the reset when nothing is left, without lowering the rate", () => {
    const gate = new GateLedger();
    const p = policy({ requestsPerSecond: 10 });
    gate.report(p, { signal: signal({ remaining: { requests: 0, resetMs: 1000, ageMs: 20 } }), now: 100 });
    const grant = gate.acquire(p, { caller: "b", slots: 2, inFlight: 0, now: 200 });
    expect(starts(200, grant)[0]).toBeGreaterThanOrEqual(1100);
    expect(gate.snapshot(p, 200)).toMatchObject({ rateFactor: 1, backpressureReports: 0 });
  });

  it("does not pause for nothing left when its own requests fill the quota's window: the schedule already waits for the oldest", () => {
    const gate = new GateLedger();
    const quota = { requests: 10, windowMs: 1000 };
    const own = starts(0, gate.acquire(policy(), { caller: "a", slots: 10, inFlight: 0, now: 0, signal: signal({ quota }) }));
    expect(own).toHaveLength(10);
    const last = own.at(-1)!;
    expect(gate.report(policy(), { signal: signal({ remaining: { requests: 0, resetMs: 1000, ageMs: 5 } }), now: last + 5 })).toEqual({
      pausedForMs: 0,
    });
    // Another consumer spends the quota too (0 left while the gate's own requests fill half of it): every caller waits for the reset.
    const shared = new GateLedger();
    shared.acquire(policy(), { caller: "a", slots: 5, inFlight: 0, now: 0, signal: signal({ quota }) });
    expect(shared.report(policy(), { signal: signal({ remaining: { requests: 0, resetMs: 1000, ageMs: 0 } }), now: 430 })).toEqual({
      pausedForMs: 1000,
    });
  });

  it("spends what is left no faster than the reset allows, counting the requests the provider has not seen yet", () => {
    const gate = new GateLedger();
    const p = policy({ requestsPerSecond: 100 });
    // 3 slots start after the answered request was sent (at 0): the provider's 5 left are 2 for new slots.
    gate.acquire(p, { caller: "a", slots: 4, inFlight: 0, now: 0 });
    gate.report(p, { signal: signal({ remaining: { requests: 5, resetMs: BUDGET_MIN_RESET_MS, ageMs: 30 } }), now: 30 });
    const grant = starts(30, gate.acquire(p, { caller: "a", slots: 5, inFlight: 0, now: 30 }));
    expect(grant.filter((at) => at < 30 + BUDGET_MIN_RESET_MS)).toHaveLength(2);
    const later = gate.acquire(p, { caller: "a", slots: 3, inFlight: 0, now: 30 + BUDGET_MIN_RESET_MS - 500 });
    expect(starts(30 + BUDGET_MIN_RESET_MS - 500, later).every((at) => at >= 30 + BUDGET_MIN_RESET_MS)).toBe(true);
    // A reset under a second or two is too coarse to budget by (resets come in whole seconds): only 0 left pauses.
    const coarse = new GateLedger();
    coarse.report(p, { signal: signal({ remaining: { requests: 1, resetMs: 1000, ageMs: 0 } }), now: 0 });
    expect(coarse.acquire(p, { caller: "a", slots: 5, inFlight: 0, now: 0 }).startInMs).toHaveLength(5);
  });
});

describe("GateLedger: backpressure", () => {
  it("pauses every caller until the Retry-After and lowers the rate once per second", () => {
    const gate = new GateLedger();
    const p = policy({ requestsPerSecond: 10 });
    gate.acquire(p, { caller: "a", slots: 1, inFlight: 0, now: 0 });
    gate.report(p, { signal: limited(400), now: 100 });
    // One 429 at a known rate is jitter: it pauses, and only 429s in a row lower the rate.
    expect(gate.snapshot(p, 100).rateFactor).toBe(1);
    gate.report(p, { signal: limited(400), now: 150 });
    gate.report(p, { signal: limited(400), now: 160 });
    expect(gate.snapshot(p, 160).rateFactor).toBeCloseTo(DECLARED_RATE_DECREASE, 6);
    const other = gate.acquire(p, { caller: "b", slots: 2, inFlight: 0, now: 200 });
    expect(starts(200, other)[0]).toBeGreaterThanOrEqual(550);
    const interval = 1000 / (10 * PACE_UTILIZATION * DECLARED_RATE_DECREASE);
    expect(other.startInMs[1]! - other.startInMs[0]!).toBeGreaterThanOrEqual(interval - 1);
  });

  it("pauses a few intervals of the pace for a 429 that names no wait, a second when nothing paces the provider", () => {
    const paced = new GateLedger();
    const p = policy({ requestsPerSecond: 10 });
    expect(paced.report(p, { signal: signal({ limited: 1 }), now: 0 }).pausedForMs).toBeCloseTo(
      (BARE_429_INTERVALS * 1000) / (10 * PACE_UTILIZATION),
      6,
    );
    expect(heardGate().report(policy(), { signal: signal({ limited: 1 }), now: 0 }).pausedForMs).toBe(BARE_429_WAIT_MS);
  });

  it("recovers the rate while no 429 arrives, and never drops below the floor", () => {
    const gate = new GateLedger();
    const p = policy({ requestsPerSecond: 10 });
    for (let i = 0; i < 20; i++) gate.report(p, { signal: limited(0), now: i * 2000 });
    expect(gate.snapshot(p, 40_000).rateFactor).toBeGreaterThanOrEqual(MIN_RATE_FACTOR);
    gate.acquire(p, { caller: "a", slots: 0, inFlight: 0, now: 200_000 });
    expect(gate.snapshot(p, 200_000).rateFactor).toBe(1);
  });

  it("learns the limit of a provider that says nothing: the requests it admitted in the second before its 429s", () => {
    const gate = heardGate();
    const p = policy();
    gate.acquire(p, { caller: "a", slots: 40, inFlight: 0, now: 0 });
    gate.report(p, { signal: signal({ ...limited(100), unpacedStarts: 10 }), now: 10 });
    // At once: slower than what was sent, until the 429s of the requests already out are counted.
    expect(gate.snapshot(p, 10).learnedRequestsPerSecond).toBeCloseTo(50 * RATE_DECREASE, 6);
    // After the Retry-After, and nothing leased past the measurement: the provisional rate is a guess.
    const first = starts(20, gate.acquire(p, { caller: "b", slots: 50, inFlight: 0, now: 20 }));
    expect(first[0]).toBeGreaterThanOrEqual(110);
    expect(first.at(-1)).toBeLessThanOrEqual(10 + LEARN_SETTLE_MS);
    expect(first.length).toBeLessThan(50);
    gate.report(p, { signal: limited(100, 19), now: 30 });
    // Settled: 50 sent, 20 refused, so the provider admits 30 a second; paced just under it.
    const next = gate.acquire(p, { caller: "b", slots: 3, inFlight: 0, now: 10 + LEARN_SETTLE_MS });
    expect(gate.snapshot(p, 10 + LEARN_SETTLE_MS).learnedRequestsPerSecond).toBe(30);
    expect(next.startInMs[2]! - next.startInMs[1]!).toBeCloseTo(1000 / (30 * PACE_UTILIZATION), 6);
    // Without 429s the learned limit creeps up while callers send, so a raised limit is found again.
    gate.acquire(p, { caller: "b", slots: 0, inFlight: 0, now: 60_000 });
    expect(gate.snapshot(p, 60_000).learnedRequestsPerSecond!).toBeGreaterThan(30);
  });

  it("creeps a learned limit up only while callers ask: an idle hour does not start the next run far past it", () => {
    const gate = heardGate();
    const p = policy();
    gate.acquire(p, { caller: "a", slots: 40, inFlight: 0, now: 0 });
    gate.report(p, { signal: signal({ ...limited(10), unpacedStarts: 10 }), now: 10 });
    gate.acquire(p, { caller: "a", slots: 0, inFlight: 0, now: 10 + LEARN_SETTLE_MS });
    const learned = gate.snapshot(p, 10 + LEARN_SETTLE_MS).learnedRequestsPerSecond!;
    // Asked every second for a minute: it creeps by about half a percent a second.
    for (let at = 2_000; at <= 62_000; at += 1_000) gate.acquire(p, { caller: "a", slots: 0, inFlight: 0, now: at });
    const active = gate.snapshot(p, 62_000).learnedRequestsPerSecond!;
    expect(active).toBeGreaterThan(learned * 1.25);
    // Then nobody asks for an hour: the first ask after it finds the limit where the last left it, give or take a few seconds' creep.
    gate.acquire(p, { caller: "b", slots: 0, inFlight: 0, now: 62_000 + 3_600_000 });
    expect(gate.snapshot(p, 62_000 + 3_600_000).learnedRequestsPerSecond!).toBeLessThan(active * 1.05);
  });
});

describe("GateLedger: a limit learned over a long Retry-After", () => {
  it("measures the second before the 429 though callers renew while every one waits out the pause", () => {
    const gate = heardGate();
    const p = policy();
    gate.acquire(p, { caller: "a", slots: 40, inFlight: 0, now: 0 });
    // The provider asks for 10 s: the measurement is due once the pause ends.
    gate.report(p, { signal: signal({ ...limited(10_000), unpacedStarts: 10 }), now: 10 });
    // A caller renews its hold mid-pause (its requests still in flight), past the history's 3 s.
    gate.acquire(p, { caller: "a", slots: 0, inFlight: 6, now: 5_000 });
    gate.report(p, { signal: limited(10_000, 9), now: 6_000 });
    gate.acquire(p, { caller: "a", slots: 0, inFlight: 0, now: 10_010 + LEARN_SETTLE_MS });
    // 50 started in the second before the 429, 10 of them refused: 40 a second (it forgot the starts: 1 a second).
    expect(gate.snapshot(p, 10_010 + LEARN_SETTLE_MS).learnedRequestsPerSecond).toBe(40);
  });
});

describe("GateLedger: a limit learned from several callers", () => {
  it("counts every caller's unpaced starts in the second before a 429, though most tell them after it", () => {
    const gate = heardGate();
    const p = policy();
    // Three callers each start 20 requests unpaced over the first second; the provider admits 45 a second.
    gate.report(p, { signal: signal({ ...limited(100, 15), unpacedStarts: 20, unpacedSinceMs: 990, unpacedLastMs: 50 }), now: 1000 });
    // The other two tell theirs with their next calls, up to a second later.
    gate.acquire(p, {
      caller: "b",
      slots: 0,
      inFlight: 0,
      signal: signal({ unpacedStarts: 20, unpacedSinceMs: 1490, unpacedLastMs: 550 }),
      now: 1500,
    });
    gate.acquire(p, {
      caller: "c",
      slots: 0,
      inFlight: 0,
      signal: signal({ unpacedStarts: 20, unpacedSinceMs: 1890, unpacedLastMs: 950 }),
      now: 1900,
    });
    gate.acquire(p, { caller: "a", slots: 0, inFlight: 0, now: 1000 + LEARN_SETTLE_MS });
    // 60 started in the second before the 429s, 15 refused: 45.
    expect(gate.snapshot(p, 1000 + LEARN_SETTLE_MS).learnedRequestsPerSecond).toBe(45);
  });
});

describe("GateLedger: concurrency", () => {
  it("never lets the units held sum past the limit", () => {
    const p = policy({ concurrency: 10 });
    const gate = heardGate(p);
    const a = gate.acquire(p, { caller: "a", slots: 8, inFlight: 0, now: 0 });
    const b = gate.acquire(p, { caller: "b", slots: 8, inFlight: 0, now: 0 });
    expect(a.units! + b.units!).toBeLessThanOrEqual(10);
    expect(b.startInMs.length).toBe(b.units);
  });

  it("grants slots of the rate alone on the schedule to a caller whose requests hold every unit it may have", () => {
    const policy: PacingPolicy = { requestsPerSecond: 10, concurrency: 2, batchParallelism: 1 };
    const gate = new GateLedger();
    expect(gate.acquire(policy, { caller: "a", slots: 2, inFlight: 0, now: 0 }).startInMs).toHaveLength(2);
    // Both units busy: a call's slot waits for one, a lookup's slot of the rate alone does not, and takes its turn.
    expect(gate.acquire(policy, { caller: "a", slots: 1, inFlight: 2, now: 10 }).startInMs).toEqual([]);
    const grant = gate.acquire(policy, { caller: "a", slots: 2, rateOnly: 1, inFlight: 2, now: 10 });
    expect(grant).toMatchObject({ units: 2, startInMs: [2 * (1000 / (10 * PACE_UTILIZATION)) - 10] });
    expect(gate.snapshot(policy, 10)).toMatchObject({ slotsGranted: 3, unitsHeld: 2 });
  });

  it("tells a caller without units to ask again soon, and trims the others to a fair share as they renew", () => {
    const p = policy({ concurrency: 10 });
    const gate = heardGate(p);
    gate.acquire(p, { caller: "a", slots: 10, inFlight: 0, now: 0 });
    const starved = gate.acquire(p, { caller: "b", slots: 5, inFlight: 0, now: 1 });
    expect(starved.units).toBe(0);
    expect(starved.retryInMs).toBe(CONCURRENCY_RETRY_MS);
    const renewed = gate.acquire(p, { caller: "a", slots: 10, inFlight: 3, now: 2 });
    expect(renewed.units).toBe(5);
    expect(gate.acquire(p, { caller: "b", slots: 5, inFlight: 0, now: 3 }).units).toBe(5);
  });

  it("keeps the units held and the slots handed out when it forgets what it learned (an org's reset of the policy)", () => {
    const p = policy({ concurrency: 4, requestsPerSecond: 10 });
    const gate = heardGate(p);
    expect(gate.acquire(p, { caller: "a", slots: 3, inFlight: 0, now: 0 }).units).toBe(3);
    gate.forgetLearned();
    // Another caller gets what is left of the concurrency, not all of it again.
    expect(gate.acquire(p, { caller: "b", slots: 3, inFlight: 0, now: 1 }).units).toBe(1);
    expect(gate.snapshot(p, 1).unitsHeld).toBe(4);
  });

  it("returns a caller's units on release and when its lease lapses", () => {
    const p = policy({ concurrency: 4 });
    const gate = heardGate(p);
    gate.acquire(p, { caller: "a", slots: 4, inFlight: 0, now: 0 });
    gate.release("a");
    expect(gate.acquire(p, { caller: "b", slots: 4, inFlight: 0, now: 1 }).units).toBe(4);
    expect(gate.snapshot(p, 60_000).unitsHeld).toBe(0);
  });
});
