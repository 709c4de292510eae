import { describe, expect, it } from "vitest";
import { ExecutorSizer } from "./sizing";

/** Lets the sizer's background asks (the gates, the org's lease) finish. */
async function settle(sizer: ExecutorSizer): Promise<void> {
  for (let i = 0; i < 3; i++) {
    sizer.target();
    await new Promise((r) => setTimeout(r, 0));
  }
}

describe("ExecutorSizer", () => {
  const sizer = (pace: { requestsPerSecond: number | null; concurrency: number | null }, now = { t: 0 }) =>
    new ExecutorSizer({ min: 4, max: 64, pace: async () => pace, lease: async (wanted) => wanted, now: () => now.t });
  /** A fresh sizer's target once a report named the provider with `calls` answered in `totalMs`. */
  const sizedFor = async (pace: Parameters<typeof sizer>[0], latency: { calls: number; totalMs: number }) => {
    const s = sizer(pace);
    s.observe(["sim"], latency);
    await settle(s);
    return s.target();
  };

  it("starts at the floor, then keeps rate × latency × 2.5 / 6 executors once a provider's pace and latency are known", async () => {
    expect(sizer({ requestsPerSecond: 100, concurrency: 250 }).target()).toBe(4);
    // 100 requests/s at 500 ms: 50 in flight, 125 with the headroom, 21 executors of six.
    expect(await sizedFor({ requestsPerSecond: 100, concurrency: 250 }, { calls: 10, totalMs: 5_000 })).toBe(21);
  });

  it("sizes the map as soon as the first latency arrives, not a refresh after the provider was first seen", async () => {
    const now = { t: 0 };
    const s = sizer({ requestsPerSecond: 100, concurrency: 250 }, now);
    await s.start();
    // The first report names the provider before any of its requests has answered: no latency, the floor.
    s.observe(["sim"], null);
    await settle(s);
    expect(s.target()).toBe(4);
    now.t = 1_000;
    s.observe(["sim"], { calls: 10, totalMs: 5_000 });
    await settle(s);
    expect(s.target()).toBe(21);
  });

  it("sizes by how long the oldest request has waited until the first latency is known, then by the latency", async () => {
    const now = { t: 0 };
    const s = sizer({ requestsPerSecond: 100, concurrency: 250 }, now);
    await s.start();
    expect(s.sizing).toBe(true);
    // Waited 0.8 s already: 100 × 0.8 × 2.5 / 6 ≈ 34 executors, leased at once (no refresh interval to wait out).
    s.observe(["sim"], null, 800);
    await settle(s);
    expect(s.target()).toBe(34);
    // A shorter wait seen later lowers nothing; an answer in 500 ms replaces the bound.
    s.observe(["sim"], null, 300);
    await settle(s);
    expect(s.target()).toBe(34);
    now.t = 1_000;
    s.observe(["sim"], { calls: 6, totalMs: 3_000 });
    await settle(s);
    expect(s.target()).toBe(21);
    expect(s.sizing).toBe(false);
  });

  it("says when a refresh in the background changed the target, so the map widens without waiting for a report", async () => {
    const resized: number[] = [];
    const s = new ExecutorSizer({
      min: 4,
      max: 64,
      pace: async () => ({ requestsPerSecond: 100, concurrency: 250 }),
      lease: async (wanted) => wanted,
      onResized: () => resized.push(s.target()),
      now: () => 0,
    });
    await s.start();
    s.observe(["sim"], { calls: 10, totalMs: 5_000 });
    // One ask starts the refresh; nothing asks again.
    expect(s.target()).toBe(4);
    await new Promise((r) => setTimeout(r, 10));
    expect(resized).toEqual([21]);
  });

  it("never sizes past the provider's concurrency, headroom included", async () => {
    // 100 requests/s at 2 s: 200 in flight, 500 with the headroom, but 250 at once at most: 42 executors.
    expect(await sizedFor({ requestsPerSecond: 100, concurrency: 250 }, { calls: 10, totalMs: 20_000 })).toBe(42);
  });

  it("keeps to what the org's directory leases it", async () => {
    const leased = new ExecutorSizer({
      min: 4,
      max: 64,
      pace: async () => ({ requestsPerSecond: 100, concurrency: 250 }),
      lease: async (wanted) => Math.min(wanted, 3),
      now: () => 0,
    });
    await leased.start();
    expect(leased.target()).toBe(3);
  });

  it("is bounded by the provider's concurrency without a rate, and by the ceiling", async () => {
    expect(await sizedFor({ requestsPerSecond: null, concurrency: 30 }, { calls: 1, totalMs: 5_000 })).toBe(5);
    expect(await sizedFor({ requestsPerSecond: null, concurrency: null }, { calls: 1, totalMs: 50 })).toBe(64);
  });

  it("widens a map only while a provider's gate has slots free: a longer latency under a saturated rate adds none", async () => {
    const now = { t: 0 };
    const pace = { requestsPerSecond: 100, concurrency: 250, bookedForMs: 0 };
    const s = new ExecutorSizer({ min: 4, max: 64, pace: async () => pace, lease: async (wanted) => wanted, now: () => now.t });
    await s.start();
    s.observe(["sim"], { calls: 10, totalMs: 5_000 });
    await settle(s);
    expect(s.target()).toBe(21);
    // The gate hands out slots 0.8 s ahead: the executors already hold more connections than the rate fills. Answers
    // taking 2 s (the average 0.95 s now: 40 executors) add none.
    pace.bookedForMs = 800;
    now.t = 5_000;
    s.observe(["sim"], { calls: 10, totalMs: 20_000 });
    await settle(s);
    expect(s.target()).toBe(21);
    // It narrows as it would: answers in 200 ms again need fewer.
    now.t = 10_000;
    for (let i = 0; i < 6; i++) s.observe(["sim"], { calls: 10, totalMs: 2_000 });
    await settle(s);
    const narrowed = s.target();
    expect(narrowed).toBeLessThan(21);
    // Slots free again (the executors' connections are what hold the requests back): it widens.
    pace.bookedForMs = 0;
    now.t = 15_000;
    s.observe(["sim"], { calls: 10, totalMs: 20_000 });
    await settle(s);
    expect(s.target()).toBeGreaterThan(narrowed);
  });

  it("runs a map that only reuses rows at the ceiling at once, until it calls a provider", async () => {
    const now = { t: 0 };
    const s = sizer({ requestsPerSecond: 100, concurrency: 250 }, now);
    await s.start();
    expect(s.target()).toBe(4);
    s.observeReusedOnly();
    await settle(s);
    expect(s.target()).toBe(64);
    // A provider called after all: its pace sizes the map again (100/s at 50 ms: 5 in flight, one executor, the floor).
    s.observe(["sim"], { calls: 1, totalMs: 50 });
    await settle(s);
    expect(s.target()).toBe(4);
  });
});

describe("ExecutorSizer, a map's demand", () => {
  it("asks for no more executors than the map has chunks left and attempts running", async () => {
    const leases: number[] = [];
    let demand = 5;
    const sizer = new ExecutorSizer({
      min: 4,
      max: 64,
      now: () => 0,
      demand: () => demand,
      pace: async () => ({ requestsPerSecond: 100, concurrency: 250 }),
      lease: async (wanted) => {
        leases.push(wanted);
        return wanted;
      },
    });
    await sizer.start();
    // 100 requests/s at 2 s would keep 42 executors busy: five chunks left can use five.
    sizer.observe(["sim"], { calls: 1, totalMs: 2_000 });
    await settle(sizer);
    expect(sizer.target()).toBe(5);
    expect(leases.at(-1)).toBe(5);
    // A rerun's sweeps, with no provider: the ceiling, within what is left.
    demand = 2;
    const sweeping = new ExecutorSizer({
      min: 4,
      max: 64,
      now: () => 0,
      demand: () => demand,
      pace: async () => ({ requestsPerSecond: null, concurrency: null }),
      lease: async (wanted) => wanted,
    });
    sweeping.observeReusedOnly();
    await settle(sweeping);
    expect(sweeping.target()).toBe(2);
  });
});

describe("ExecutorSizer.stop", () => {
  it("returns the map's lease, and a refresh under way or asked for meanwhile does not take it again", async () => {
    let answer = () => {};
    const paced = new Promise<void>((resolve) => (answer = resolve));
    const leases: number[] = [];
    let resized = () => {};
    const sizer = new ExecutorSizer({
      min: 4,
      max: 64,
      now: () => 0,
      pace: async () => {
        await paced;
        return { requestsPerSecond: 100, concurrency: 250 };
      },
      lease: async (wanted) => {
        leases.push(wanted);
        return wanted;
      },
      onResized: () => resized(),
    });
    await sizer.start();
    // A first provider and latency: a refresh asks the gate (its answer held back here).
    sizer.observe(["sim"], { calls: 1, totalMs: 2_000 });
    sizer.target();
    // The map's last report names another provider while the refresh waits, and the map widens on each resize.
    sizer.observe(["other"], null);
    resized = () => void sizer.target();
    const stopping = sizer.stop();
    answer();
    await stopping;
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setTimeout(resolve, 0));
    expect(leases).toEqual([4, 0]);
  });

  it("does not wait for ever on a gate or a directory that never answers", async () => {
    const leases: number[] = [];
    const sizer = new ExecutorSizer({
      min: 4,
      max: 64,
      now: () => 0,
      stopWaitMs: 20,
      pace: () => new Promise(() => {}),
      lease: (wanted) => {
        leases.push(wanted);
        return wanted === 0 ? new Promise(() => {}) : Promise.resolve(wanted);
      },
    });
    await sizer.start();
    sizer.observe(["sim"], { calls: 1, totalMs: 500 });
    sizer.target();
    await sizer.stop();
    expect(leases).toEqual([4, 0]);
  });

  it("returns the lease again when a lease it gave up waiting for is answered after it", async () => {
    const leases: number[] = [];
    let answer = () => {};
    const late = new Promise<void>((resolve) => (answer = resolve));
    const sizer = new ExecutorSizer({
      min: 4,
      max: 64,
      now: () => 0,
      stopWaitMs: 20,
      pace: async () => ({ requestsPerSecond: 100, concurrency: 250 }),
      lease: async (wanted) => {
        leases.push(wanted);
        // The refresh's lease is slow to reach the directory: it may land after the one that returns the lease.
        if (wanted === 42) await late;
        return wanted;
      },
    });
    await sizer.start();
    sizer.observe(["sim"], { calls: 1, totalMs: 2_000 });
    sizer.target();
    // The refresh has asked the gate and sent its lease.
    while (leases.length < 2) await new Promise((resolve) => setTimeout(resolve, 0));
    await sizer.stop();
    expect(leases).toEqual([4, 42, 0]);
    answer();
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setTimeout(resolve, 0));
    expect(leases).toEqual([4, 42, 0, 0]);
  });
});
