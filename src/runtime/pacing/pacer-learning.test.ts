import { describe, expect, it, vi } from "vitest";
import { Pacer } from "./pacer";
import type { PacingPolicy } from "./policy";
import { readRateLimitSignals } from "./signals";
import { fakeGate } from "./fake-gate.fixture";
import { StartHistory } from "./history";
import { LEARN_SETTLE_MS, MIN_RATE_FACTOR, ProviderRate } from "./rate";

/**
 * A provider allowing `limit` requests per fixed minute that announces only `X-RateLimit-Limit: <limit>` (no window,
 * no reset) and refuses the rest with a bare 429 (no Retry-After): answers each request sent at `at`.
 */
function perMinuteProvider(limit: number) {
  const admitted = new Map<number, number>();
  return (at: number) => {
    const minute = Math.floor(at / 60_000);
    const ok = (admitted.get(minute) ?? 0) < limit;
    if (ok) admitted.set(minute, (admitted.get(minute) ?? 0) + 1);
    return { ok, minute, signals: readRateLimitSignals({ "X-RateLimit-Limit": String(limit) }, at) };
  };
}

describe("A provider announcing a quota without its window, answering bare 429s", () => {
  it("is slowed by its repeated 429s until most requests are admitted, as a provider announcing nothing is", async () => {
    vi.useFakeTimers({ now: 0, toFake: ["setTimeout", "clearTimeout", "Date"] });
    try {
      const policy: PacingPolicy = { requestsPerSecond: null, concurrency: 64, batchParallelism: 4 };
      const { gate } = fakeGate(policy, { heard: false });
      const provider = perMinuteProvider(100);
      const p = new Pacer({ gate, caller: "c", policy, now: Date.now, log: () => {} });
      const byMinute: { admitted: number; limited: number }[] = [];
      const signal = new AbortController().signal;
      const endAt = 3 * 60_000;
      // Six requests at a time (one object), each answered in 50 ms, a 429 told as backpressure and tried again.
      const workers = Array.from({ length: 6 }, async () => {
        while (Date.now() < endAt) {
          const slot = await p.slot(signal);
          if (Date.now() >= endAt) return slot.release();
          const answer = provider(Date.now());
          await new Promise((r) => setTimeout(r, 50));
          byMinute[answer.minute] ??= { admitted: 0, limited: 0 };
          const tally = byMinute[answer.minute]!;
          slot.release(answer.signals);
          if (answer.ok) tally.admitted++;
          else {
            tally.limited++;
            await p.backpressure(null);
          }
        }
      });
      let done = false;
      const all = Promise.all(workers).then(() => (done = true));
      while (!done) await vi.advanceTimersByTimeAsync(100);
      await all;
      await p.close();
      // Past the first minute (where it learns), most requests are admitted: about the provider's 100 a minute each.
      for (const minute of byMinute.slice(1)) {
        expect(minute.admitted).toBeGreaterThan(50);
        expect(minute.limited).toBeLessThan(minute.admitted);
      }
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("A windowless quota whose provider once sent a reset", () => {
  it("learns from its bare 429s once that reset is long past, instead of holding the quota at its floor", () => {
    const policy: PacingPolicy = { requestsPerSecond: null, concurrency: 64, batchParallelism: 4 };
    const rate = new ProviderRate();
    const history = new StartHistory();
    const quota = { requests: 100, windowMs: null };
    // One answer with a reset (a window of a minute, for ten minutes), then nothing but the quota.
    rate.hear({ quota, resetMs: 60_000, now: 0 });
    const later = 30 * 60_000;
    for (let i = 0; i < 10; i++) {
      const now = later + i * 2_000;
      rate.hear({ quota, resetMs: null, now });
      rate.rateLimited(policy, { now, count: 3, pausedUntil: now, history });
      rate.settle({ now: now + LEARN_SETTLE_MS, pausedUntil: now, history });
    }
    expect(rate.factor).toBe(1);
    expect(rate.learned).not.toBeNull();
    expect(rate.effective(policy)).toBeLessThan(100 * MIN_RATE_FACTOR);
  });
});
