import { describe, expect, it } from "vitest";
import { mayRetry, RetryBudget, retryDelayMs } from "./backoff";

const policy = { providerAttempts: 3, rateLimitAttempts: 6, providerRetryBaseMs: 100, providerRetryMaxMs: 1000 };

describe("retryDelayMs", () => {
  it("doubles from the base, honours a longer Retry-After, and never passes the cap", () => {
    expect([1, 2, 3, 4, 5].map((a) => retryDelayMs(policy, a, null))).toEqual([100, 200, 400, 800, 1000]);
    expect(retryDelayMs(policy, 1, 650)).toBe(650);
    expect(retryDelayMs(policy, 3, 50)).toBe(400);
    expect(retryDelayMs(policy, 1, 60_000)).toBe(1000);
  });
});

describe("mayRetry", () => {
  it("gives 429s more attempts than other transient failures, and permanent ones none", () => {
    expect(mayRetry(policy, { kind: "permanent" }, 1)).toBe(false);
    expect(mayRetry(policy, { kind: "transient" }, 2)).toBe(true);
    expect(mayRetry(policy, { kind: "transient" }, 3)).toBe(false);
    expect(mayRetry(policy, { kind: "rate_limited", retryAfterMs: 10 }, 5)).toBe(true);
    expect(mayRetry(policy, { kind: "rate_limited", retryAfterMs: 10 }, 6)).toBe(false);
  });
});

describe("RetryBudget", () => {
  it("hands out what is left, counts it, and says once that it ran out", () => {
    const budget = new RetryBudget({ remaining: 2 });
    expect([budget.take(), budget.take(), budget.take()]).toEqual([true, true, false]);
    expect(budget.spent).toBe(2);
    expect(budget.noteExhausted()).toBe(true);
    expect(budget.noteExhausted()).toBe(false);
    expect(new RetryBudget({ remaining: -5 }).take()).toBe(false);
  });
});
