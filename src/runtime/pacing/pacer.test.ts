import { describe, expect, it, vi } from "vitest";
import { RATE_RECHECK_MS } from "./gate";
import { HOLDER_TTL_MS } from "./units";
import { Pacer, type GateClient } from "./pacer";
import { pacingPolicyFor, PACE_UTILIZATION, type PacingPolicy } from "./policy";
import { NO_SIGNALS } from "./signals";
import { fakeGate } from "./fake-gate.fixture";

const pacer = (gate: GateClient, policy: PacingPolicy) => new Pacer({ gate, caller: "c", policy, now: Date.now, log: () => {} });

/** The most of `starts` (sorted in place) within any one second, as the simulated provider's window counts them. */
function mostInOneSecond(starts: number[]): number {
  starts.sort((a, b) => a - b);
  let most = 0;
  for (let i = 0, j = 0; i < starts.length; i++) {
    while (starts[j]! < starts[i]! - 999) j++;
    most = Math.max(most, i - j + 1);
  }
  return most;
}

/** Makes `count` requests through `p`, each holding its slot `holdMs`; answers the most in flight at once. */
async function peakInFlight(p: Pacer, count: number, holdMs: number): Promise<number> {
  const signal = new AbortController().signal;
  let inFlight = 0;
  let most = 0;
  await Promise.all(
    Array.from({ length: count }, async () => {
      const slot = await p.slot(signal);
      most = Math.max(most, ++inFlight);
      await new Promise((r) => setTimeout(r, holdMs));
      inFlight--;
      slot.release();
    }),
  );
  return most;
}

/**
 * Runs `body` on fake timers, advancing them a millisecond at a time while it
 * waits: a pacer drops a slot whose timer fires late, and on a loaded machine
 * real timers do, which would add gate calls these tests count.
 */
async function onFakeClock(body: () => Promise<void>, stepMs = 1): Promise<void> {
  vi.useFakeTimers({ now: 1_000_000, toFake: ["setTimeout", "clearTimeout", "Date"] });
  try {
    let done = false;
    const running = body().finally(() => {
      done = true;
    });
    for (let ms = 0; !done && ms < 60_000; ms += stepMs) await vi.advanceTimersByTimeAsync(stepMs);
    await running;
  } finally {
    vi.useRealTimers();
  }
}

describe("Pacer", () => {
  it("leases many slots in one gate call", () =>
    onFakeClock(async () => {
      const policy: PacingPolicy = { requestsPerSecond: 1000, concurrency: null, batchParallelism: 1 };
      const { gate, calls } = fakeGate(policy);
      const p = pacer(gate, policy);
      const signal = new AbortController().signal;
      // Six at a time (an object's requests in flight), each a few ms long.
      await Promise.all(
        Array.from({ length: 30 }, async () => {
          const slot = await p.slot(signal);
          await new Promise((r) => setTimeout(r, 5));
          slot.release();
        }),
      );
      // Thirty requests: at most one call for every two (a call per six it leased, and per the few ending about together).
      expect(calls.acquire).toBeLessThanOrEqual(15);
      await p.close();
    }));

  it("serves the lowest rank waiting first, so a row's second request goes before later rows' first", () =>
    onFakeClock(async () => {
      const policy = pacingPolicyFor("sim");
      const { gate } = fakeGate(policy);
      const p = pacer(gate, policy);
      const signal = new AbortController().signal;
      const starts: string[] = [];
      // Twelve rows of two requests each, 10 ms apiece, through six units: row r is rank r.
      await Promise.all(
        Array.from({ length: 12 }, async (_, row) => {
          for (const call of ["find", "verify"]) {
            const slot = await p.slot(signal, row);
            starts.push(`${call} ${row}`);
            await new Promise((r) => setTimeout(r, 10));
            slot.release();
          }
        }),
      );
      // First come, first served would start every find before any verify. Ranked, the unit row 0's find frees
      // goes to find 6 (row 0 asks for its verify only after), and each unit freed after that to a verify.
      expect(starts.slice(0, 12)).toEqual([
        ...["find 0", "find 1", "find 2", "find 3", "find 4", "find 5", "find 6"],
        ...["verify 0", "verify 1", "verify 2", "verify 3", "verify 4"],
      ]);
      await p.close();
    }));

  it("serves a slot of the rate alone (a lookup) while its own calls hold every unit, on the rate's schedule", () =>
    onFakeClock(async () => {
      const policy: PacingPolicy = { requestsPerSecond: 10, concurrency: null, batchParallelism: 1 };
      const { gate, ledger } = fakeGate(policy);
      const p = pacer(gate, policy);
      const signal = new AbortController().signal;
      const starts: number[] = [];
      // Six calls hold every unit until ten lookups have been answered: none of them waits for a unit.
      const calls = await Promise.all(Array.from({ length: 6 }, () => p.slot(signal).finally(() => starts.push(Date.now()))));
      await Promise.all(
        Array.from({ length: 10 }, async () => {
          const lookup = await p.rateSlot(signal);
          starts.push(Date.now());
          lookup.release();
        }),
      );
      for (const call of calls) call.release();
      // Each took a slot of the gate's schedule: the sixteen starts keep to the rate.
      expect(ledger.snapshot(policy, Date.now()).slotsGranted).toBe(16);
      expect(mostInOneSecond(starts)).toBeLessThanOrEqual(10);
      await p.close();
    }));

  it("serves a slot of the rate alone before the calls waiting, whatever their rank", () =>
    onFakeClock(async () => {
      const policy: PacingPolicy = { requestsPerSecond: 10, concurrency: null, batchParallelism: 1 };
      const { gate } = fakeGate(policy);
      const p = pacer(gate, policy);
      const signal = new AbortController().signal;
      const order: string[] = [];
      const take = async (what: string, slot: Promise<{ release(): void }>) => {
        (await slot).release();
        order.push(what);
      };
      await Promise.all([take("call 0", p.slot(signal, 0)), take("call 1", p.slot(signal, 1)), take("lookup", p.rateSlot(signal, 5))]);
      expect(order).toEqual(["lookup", "call 0", "call 1"]);
      await p.close();
    }));

  it("holds at most an object's six requests' units, and returns them when done", async () => {
    const policy = pacingPolicyFor("sim");
    const { gate, calls, ledger } = fakeGate(policy);
    const p = pacer(gate, policy);
    expect(await peakInFlight(p, 30, 1)).toBe(6);
    expect(ledger.snapshot(policy, Date.now()).unitsHeld).toBe(6);
    expect(calls.acquire).toBe(1);
    await p.close();
    expect(calls.release).toBe(1);
    expect(ledger.snapshot(policy, Date.now()).unitsHeld).toBe(0);
  });

  it("asks the gate about once a second while nothing paces the provider", async () => {
    const policy = pacingPolicyFor("sim");
    const { gate, calls } = fakeGate(policy);
    const p = pacer(gate, policy);
    const signal = new AbortController().signal;
    for (let i = 0; i < 100; i++) (await p.slot(signal)).release();
    expect(calls.acquire).toBe(1);
  });

  it("keeps its requests in flight within the units it holds", async () => {
    const policy: PacingPolicy = { requestsPerSecond: null, concurrency: 3, batchParallelism: 1 };
    const { gate } = fakeGate(policy);
    const p = pacer(gate, policy);
    expect(await peakInFlight(p, 12, 2)).toBeLessThanOrEqual(3);
    await p.close();
  });

  it("reports a 429 to the gate and drops the slots leased before it", () =>
    onFakeClock(async () => {
      const policy: PacingPolicy = { requestsPerSecond: 1000, concurrency: null, batchParallelism: 1 };
      const { gate, calls } = fakeGate(policy);
      const p = pacer(gate, policy);
      const signal = new AbortController().signal;
      (await p.slot(signal)).release();
      await p.backpressure(30);
      expect(calls.report).toBe(1);
      const before = Date.now();
      (await p.slot(signal)).release();
      expect(Date.now() - before).toBeGreaterThanOrEqual(25);
    }));

  it("sees a rate raised while it waits for a slot far off at the old one (an org's PUT /v1/pacing)", () =>
    onFakeClock(async () => {
      // Declared at one request per 100 s by mistake: after the first request, the next slot is 100 s away.
      const policy: PacingPolicy = { requestsPerSecond: 0.01, concurrency: null, batchParallelism: 1 };
      const { gate } = fakeGate(policy);
      const p = pacer(gate, policy);
      const signal = new AbortController().signal;
      (await p.slot(signal)).release();
      const asked = Date.now();
      const next = p.slot(signal);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      // Corrected a second later (the gate reads the org's policy at each call): the waiter goes at the new pace.
      policy.requestsPerSecond = 10;
      (await next).release();
      expect(Date.now() - asked).toBeLessThanOrEqual(RATE_RECHECK_MS + 1000);
      await p.close();
    }));

  it("takes a tool's wait that is not a number (a date header read as one) as unsaid, and keeps serving slots", () =>
    onFakeClock(async () => {
      const policy: PacingPolicy = { requestsPerSecond: 1000, concurrency: null, batchParallelism: 1 };
      const { gate, told } = fakeGate(policy);
      const p = pacer(gate, policy);
      const signal = new AbortController().signal;
      (await p.slot(signal)).release();
      await p.backpressure(Number.NaN);
      // Paused until NaN, it kept no slot it leased and served none (the fake clock gives up after a minute).
      for (let i = 0; i < 3; i++) (await p.slot(signal)).release();
      expect(told.every((signal) => signal.retryAfterMs === null || Number.isFinite(signal.retryAfterMs))).toBe(true);
      expect(told.some((signal) => signal.limited > 0)).toBe(true);
      await p.close();
    }));

  it("rejects a waiter whose signal aborts, and fails waiters retryably when the gate is unreachable", async () => {
    const policy = pacingPolicyFor("sim");
    const never: GateClient = { acquire: () => new Promise(() => {}), report: async () => ({ pausedForMs: 0 }), release: async () => {} };
    const controller = new AbortController();
    const waiting = pacer(never, policy).slot(controller.signal);
    controller.abort(new Error("stop"));
    await expect(waiting).rejects.toThrow("stop");

    const broken: GateClient = {
      acquire: async () => Promise.reject(new Error("down")),
      report: async () => ({ pausedForMs: 0 }),
      release: async () => {},
    };
    await expect(pacer(broken, policy).slot(new AbortController().signal)).rejects.toMatchObject({
      code: "pacing_unavailable",
      retryable: true,
    });
  });

  it("probes a provider it has not heard from: one request first, its answer told at once, then the rest paced by it", async () => {
    const policy = pacingPolicyFor("sim");
    const { gate, calls, ledger } = fakeGate(policy, { heard: false });
    const p = pacer(gate, policy);
    const signal = new AbortController().signal;
    const first = await p.slot(signal);
    const rest = Array.from({ length: 5 }, () => p.slot(signal));
    await new Promise((r) => setTimeout(r, 60));
    expect(calls.report).toBe(0);
    first.release({ ...NO_SIGNALS, quota: { requests: 100, windowMs: 1000 } });
    const slots = await Promise.all(rest);
    expect(calls.report).toBe(1);
    expect(ledger.snapshot(policy, Date.now())).toMatchObject({ heard: true, announcedRequestsPerSecond: 100 });
    expect(ledger.snapshot(policy, Date.now()).effectiveRequestsPerSecond).toBeCloseTo(100 * PACE_UTILIZATION, 6);
    for (const slot of slots) slot.release();
    await p.close();
  });

  it("carries what answers said with its next lease, and tells the gate at once when nothing is left", () =>
    onFakeClock(async () => {
      const policy: PacingPolicy = { requestsPerSecond: 1000, concurrency: null, batchParallelism: 1 };
      const { gate, calls, told } = fakeGate(policy);
      const p = pacer(gate, policy);
      const signal = new AbortController().signal;
      (await p.slot(signal)).release({ ...NO_SIGNALS, remaining: { requests: 7, resetMs: 1000 } });
      expect(calls.report).toBe(0);
      (await p.slot(signal)).release();
      expect(told.at(-1)?.remaining).toMatchObject({ requests: 7, resetMs: 1000 });

      (await p.slot(signal)).release({ ...NO_SIGNALS, remaining: { requests: 0, resetMs: 40 } });
      expect(calls.report).toBe(1);
      const before = Date.now();
      (await p.slot(signal)).release();
      expect(Date.now() - before).toBeGreaterThanOrEqual(30);
    }));

  it("counts a 429 whose wait the gate already knows, and tells it with the next call instead of calling again", () =>
    onFakeClock(async () => {
      const policy: PacingPolicy = { requestsPerSecond: 1000, concurrency: null, batchParallelism: 1 };
      const { gate, calls, told } = fakeGate(policy);
      const p = pacer(gate, policy);
      await Promise.all([p.backpressure(40), p.backpressure(40), p.backpressure(40)]);
      expect(calls.report).toBe(1);
      (await p.slot(new AbortController().signal)).release();
      expect(told.reduce((sum, s) => sum + s.limited, 0)).toBe(3);
    }));
});

describe("Pacers sharing one gate", () => {
  it("never start more requests in any second than the declared rate, however many callers ask, and lease in blocks", async () => {
    vi.useFakeTimers({ now: 0, toFake: ["setTimeout", "clearTimeout", "Date"] });
    try {
      const rate = 100;
      const policy: PacingPolicy = { requestsPerSecond: rate, concurrency: 250, batchParallelism: 4 };
      const { gate, calls } = fakeGate(policy);
      const latencyMs = 500;
      const callers = 30;
      const starts: number[] = [];
      const signal = new AbortController().signal;
      // Thirty objects, each with 24 requests to make, each holding its slot for the provider's latency.
      const work = Array.from({ length: callers }, (_, c) => {
        const p = new Pacer({ gate, caller: `c${c}`, policy, now: Date.now, log: () => {} });
        return Promise.all(
          Array.from({ length: 24 }, async () => {
            const slot = await p.slot(signal);
            starts.push(Date.now());
            await new Promise((r) => setTimeout(r, latencyMs));
            slot.release();
          }),
        ).then(() => p.close());
      });
      let done = false;
      const all = Promise.all(work).then(() => (done = true));
      for (let step = 0; !done; step++) {
        if (step > 1_000) throw new Error(`stuck with ${starts.length} starts, ${calls.acquire} acquires`);
        await vi.advanceTimersByTimeAsync(100);
      }
      await all;
      expect(starts).toHaveLength(callers * 24);
      expect(mostInOneSecond(starts)).toBeLessThanOrEqual(rate);
      // Busy throughout: the gate's pace (its share of the rate), not the callers, set how long it took.
      const seconds = (starts.at(-1)! - starts[0]!) / 1000;
      expect(starts.length / seconds).toBeGreaterThan(rate * PACE_UTILIZATION * 0.95);
      // About one gate call per caller each time its six requests end, not one per request (nor calls while all six are out).
      expect(calls.acquire).toBeLessThan(starts.length / 5);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("A pacer waiting out a 429 with requests still out", () => {
  it("keeps renewing its hold on their units, so the provider's concurrency is not given to others meanwhile", async () => {
    vi.useFakeTimers({ now: 0, toFake: ["setTimeout", "clearTimeout", "Date"] });
    try {
      const policy: PacingPolicy = { requestsPerSecond: 100, concurrency: 4, batchParallelism: 1 };
      const { gate, ledger } = fakeGate(policy);
      const slow = new Pacer({ gate, caller: "slow", policy, now: Date.now, log: () => {} });
      const signal = new AbortController().signal;
      const held = Promise.all(Array.from({ length: 3 }, () => slow.slot(signal)));
      await vi.advanceTimersByTimeAsync(100);
      const slots = await held;
      // A 429 asks for 30 s; another row waits meanwhile (its slot is leased only after the pause).
      await slow.backpressure(30_000);
      const waiting = slow.slot(signal);
      // Past the gate's hold on units (10 s), with the three requests still out.
      await vi.advanceTimersByTimeAsync(HOLDER_TTL_MS * 2);
      expect(ledger.snapshot(policy, Date.now()).unitsHeld).toBeGreaterThanOrEqual(3);
      for (const slot of slots) slot.release();
      await vi.advanceTimersByTimeAsync(30_000);
      (await waiting).release();
      await slow.close();
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("Pacers whose gate answers late and whose calls come unevenly", () => {
  it("still never start more requests in any second than the declared rate", async () => {
    vi.useFakeTimers({ now: 0, toFake: ["setTimeout", "clearTimeout", "Date"] });
    try {
      const rate = 100;
      const policy: PacingPolicy = { requestsPerSecond: rate, concurrency: 250, batchParallelism: 4 };
      const { gate: inner } = fakeGate(policy);
      // A fixed sequence of pseudo-random numbers, so a failure replays.
      let seed = 7;
      const random = () => {
        seed = (seed * 1103515245 + 12345) % 2 ** 31;
        return seed / 2 ** 31;
      };
      const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
      // Each gate call waits up to 60 ms to reach the gate and as long again for its answer to come back.
      const gate: GateClient = {
        acquire: async (r) => {
          await sleep(random() * 60);
          const grant = await inner.acquire(r);
          await sleep(random() * 60);
          return grant;
        },
        report: inner.report,
        release: inner.release,
      };
      const starts: number[] = [];
      const signal = new AbortController().signal;
      // Thirty objects; each of their calls comes after a pause of its own, so slots leased ahead may go stale.
      const work = Array.from({ length: 30 }, (_, c) => {
        const p = new Pacer({ gate, caller: `c${c}`, policy, now: Date.now, log: () => {} });
        return Promise.all(
          Array.from({ length: 6 }, async () => {
            for (let i = 0; i < 4; i++) {
              await sleep(random() * 400);
              const slot = await p.slot(signal);
              starts.push(Date.now());
              await sleep(50 + random() * 450);
              slot.release();
            }
          }),
        ).then(() => p.close());
      });
      let done = false;
      const all = Promise.all(work).then(() => (done = true));
      for (let step = 0; !done; step++) {
        if (step > 2_000) throw new Error(`stuck with ${starts.length} starts`);
        await vi.advanceTimersByTimeAsync(50);
      }
      await all;
      expect(starts).toHaveLength(30 * 24);
      expect(mostInOneSecond(starts)).toBeLessThanOrEqual(rate);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("A pacer holding slots whose start has passed", () => {
  it("drops them and leases fresh ones, whether its callers came late or its timers fired late", async () => {
    vi.useFakeTimers({ now: 0, toFake: ["setTimeout", "clearTimeout", "Date"] });
    try {
      const policy: PacingPolicy = { requestsPerSecond: 100, concurrency: 250, batchParallelism: 1 };
      const { gate: inner, calls } = fakeGate(policy);
      // The gate's answers take 5 ms to come back.
      const gate: GateClient = {
        ...inner,
        acquire: async (r) => inner.acquire(r).then((g) => new Promise((ok) => setTimeout(() => ok(g), 5))),
      };
      // The pacer's clock runs `behind` ms ahead of its timers: as if its event loop had been busy that long.
      let behind = 0;
      const p = new Pacer({ gate, caller: "c", policy, now: () => Date.now() + behind, log: () => {} });
      // Six callers ask, and give up while the lease is on its way: its slots stay with the pacer.
      const waiting = new AbortController();
      const abandoned = Array.from({ length: 6 }, () => p.slot(waiting.signal).catch(() => "aborted"));
      await vi.advanceTimersByTimeAsync(1);
      waiting.abort();
      expect(await Promise.all(abandoned)).toEqual(Array(6).fill("aborted"));
      await vi.advanceTimersByTimeAsync(10);
      expect(calls.acquire).toBe(1);
      // Callers come back a second later: those slots are long past, so the pacer leases again.
      await vi.advanceTimersByTimeAsync(1000);
      const signal = new AbortController().signal;
      const late = p.slot(signal);
      await vi.advanceTimersByTimeAsync(50);
      (await late).release();
      expect(calls.acquire).toBe(2);
      // Four slots, the last three a few intervals ahead, whose timers fire 100 ms late: those three are leased again.
      const next = Array.from({ length: 4 }, () => p.slot(signal));
      await vi.advanceTimersByTimeAsync(6);
      expect(calls.acquire).toBe(3);
      behind += 100;
      await vi.advanceTimersByTimeAsync(200);
      for (const slot of await Promise.all(next)) slot.release();
      expect(calls.acquire).toBeGreaterThan(3);
      await p.close();
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("a pause over unpaced grants", () => {
  it("starts nothing unpaced while a 429's pause lasts, though the gate (never told of it) grants unpaced starts", () =>
    onFakeClock(async () => {
      // Nothing paces the provider: the gate grants unpaced starts. It is never told of the 429 (its report fails).
      const policy: PacingPolicy = { requestsPerSecond: null, concurrency: null, batchParallelism: 1 };
      const { gate: inner } = fakeGate(policy);
      const gate: GateClient = { ...inner, report: async () => Promise.reject(new Error("the gate is unreachable")) };
      const p = pacer(gate, policy);
      const signal = new AbortController().signal;
      (await p.slot(signal)).release();
      await p.backpressure(5_000);
      const pausedAt = Date.now();
      // Once stack-deep: each unpaced start fell before the pause, was put back and handed out again, synchronously.
      (await p.slot(signal)).release();
      expect(Date.now() - pausedAt).toBeGreaterThanOrEqual(5_000);
      await p.close();
    }, 50));

  it("keeps the units of its requests in flight while a waiter waits out the pause", () =>
    onFakeClock(async () => {
      const policy: PacingPolicy = { requestsPerSecond: null, concurrency: 6, batchParallelism: 1 };
      const { gate: inner, ledger } = fakeGate(policy);
      const gate: GateClient = { ...inner, report: async () => Promise.reject(new Error("the gate is unreachable")) };
      const p = pacer(gate, policy);
      const signal = new AbortController().signal;
      const held = await Promise.all([p.slot(signal), p.slot(signal), p.slot(signal)]);
      await p.backpressure(50_000);
      const waiting = p.slot(signal);
      // Within the pause, past the gate's holder lease many times over: the three requests still out hold their units.
      await new Promise((resolve) => setTimeout(resolve, 4 * HOLDER_TTL_MS));
      expect(ledger.snapshot(policy, Date.now()).unitsHeld).toBeGreaterThanOrEqual(3);
      for (const slot of held) slot.release();
      (await waiting).release();
      await p.close();
    }, 50));
});
