import { describe, expect, it } from "vitest";
import { AnswerSignals, NO_SIGNALS, readRateLimitSignals, saneWaitMs } from "./signals";

const NOW = Date.parse("2026-12-01T12:00:00Z");
const read = (headers: Record<string, string>) => readRateLimitSignals(headers, NOW);

describe("Retry-After", () => {
  it("reads delta-seconds, an HTTP date, and the precise Retry-After-Ms first", () => {
    expect(read({ "Retry-After": "3" }).retryAfterMs).toBe(3000);
    expect(read({ "Retry-After": "Tue, 01 Dec 2026 12:00:07 GMT" }).retryAfterMs).toBe(7000);
    expect(read({ "Retry-After": "Tue, 01 Dec 2026 11:00:00 GMT" }).retryAfterMs).toBe(0);
    expect(read({ "Retry-After": "3", "Retry-After-Ms": "2500" }).retryAfterMs).toBe(2500);
  });

  it("ignores malformed values", () => {
    for (const value of ["soon", "-1", "5s", "", "5, 6"]) expect(read({ "Retry-After": value }).retryAfterMs).toBeNull();
    expect(read({ "Retry-After-Ms": "x", "Retry-After": "2" }).retryAfterMs).toBe(2000);
  });

  it("reads a header repeated with one value (joined by a proxy) as that value", () => {
    const headers = new Headers();
    headers.append("Retry-After", "120");
    headers.append("Retry-After", "120");
    expect(headers.get("Retry-After")).toBe("120, 120");
    expect(readRateLimitSignals(headers, NOW).retryAfterMs).toBe(120_000);
    expect(read({ "Retry-After-Ms": "250, 250" }).retryAfterMs).toBe(250);
    const date = new Headers();
    const at = new Date(NOW + 120_000).toUTCString();
    date.append("Retry-After", at);
    date.append("Retry-After", at);
    expect(readRateLimitSignals(date, NOW).retryAfterMs).toBe(120_000);
    const fields = new Headers();
    for (const [name, value] of [
      ["X-RateLimit-Limit", "100"],
      ["X-RateLimit-Remaining", "0"],
      ["X-RateLimit-Reset", "30"],
    ] as const) {
      fields.append(name, value);
      fields.append(name, value);
    }
    expect(readRateLimitSignals(fields, NOW).remaining).toEqual({ requests: 0, resetMs: 30_000 });
    // Differing values say nothing.
    expect(read({ "Retry-After": "5, 6" }).retryAfterMs).toBeNull();
  });
});

describe("values past what pacing can take", () => {
  it("are dropped or bounded, so that the gate never refuses a caller's report over a provider's header", () => {
    // "Unlimited" as Long.MAX, a window of zero, a remaining count past any limit, a wait of centuries.
    expect(read({ "X-RateLimit-Limit": "9223372036854775807" }).quota).toBeNull();
    expect(read({ "X-RateLimit-Limit": "100;w=0" }).quota).toEqual({ requests: 100, windowMs: null });
    expect(read({ "X-RateLimit-Remaining": "9223372036854775807", "X-RateLimit-Reset": "5" }).remaining).toBeNull();
    expect(read({ "Retry-After": `1${"0".repeat(400)}` }).retryAfterMs).toBe(3_600_000);
    expect(read({ "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "99999999" }).remaining).toEqual({ requests: 0, resetMs: 3_600_000 });
  });

  it("as a tool's own wait: NaN (a date read as a number) and negatives say nothing; Infinity is an hour", () => {
    expect([Number.NaN, -5, undefined, null].map(saneWaitMs)).toEqual([null, null, null, null]);
    expect([0, 1500, Number.POSITIVE_INFINITY].map(saneWaitMs)).toEqual([0, 1500, 3_600_000]);
  });
});

describe("IETF RateLimit-Policy and RateLimit", () => {
  it("reads the quota and what is left", () => {
    expect(read({ "RateLimit-Policy": '"default";q=100;w=1', RateLimit: '"default";r=42;t=1' })).toEqual({
      retryAfterMs: null,
      quota: { requests: 100, windowMs: 1000 },
      remaining: { requests: 42, resetMs: 1000 },
    });
  });

  it("takes the most restrictive of several policies, and the policy with the least left", () => {
    const signals = read({
      "RateLimit-Policy": '"burst";q=100;w=60, "daily";q=1000;w=86400, "bytes";q=10;w=1;qu="content-bytes"',
      RateLimit: '"burst";r=80;t=30, "daily";r=3;t=40000',
    });
    expect(signals.quota).toEqual({ requests: 1000, windowMs: 86_400_000 });
    // Its reset in 11 h is taken as an hour, as the gate takes any wait.
    expect(signals.remaining).toEqual({ requests: 3, resetMs: 3_600_000 });
  });

  it("reads the older drafts' forms", () => {
    expect(read({ RateLimit: "limit=100, remaining=42, reset=5" })).toMatchObject({
      quota: { requests: 100, windowMs: null },
      remaining: { requests: 42, resetMs: 5000 },
    });
    expect(read({ "RateLimit-Policy": "100;w=10" }).quota).toEqual({ requests: 100, windowMs: 10_000 });
    expect(read({ "RateLimit-Limit": "100, 100;w=60", "RateLimit-Remaining": "9", "RateLimit-Reset": "20" })).toMatchObject({
      quota: { requests: 100, windowMs: 60_000 },
      remaining: { requests: 9, resetMs: 20_000 },
    });
  });

  it("ignores malformed fields and values", () => {
    expect(read({ "RateLimit-Policy": '"default;q=100;w=1', RateLimit: '"default";r=-1;t=1' })).toEqual(NO_SIGNALS);
    expect(read({ "RateLimit-Policy": '"default";q=1.5;w=1, "ok";q=0;w=1', RateLimit: "remaining=abc" })).toEqual(NO_SIGNALS);
    expect(read({ RateLimit: '"default";r=4;t=x' }).remaining).toEqual({ requests: 4, resetMs: null });
  });
});

describe("X-RateLimit-*", () => {
  it("reads the limit without a window, and a reset as delta seconds, epoch seconds or epoch milliseconds", () => {
    expect(read({ "X-RateLimit-Limit": "50", "X-RateLimit-Remaining": "7", "X-RateLimit-Reset": "2" })).toEqual({
      retryAfterMs: null,
      quota: { requests: 50, windowMs: null },
      remaining: { requests: 7, resetMs: 2000 },
    });
    expect(read({ "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": String(NOW / 1000 + 30) }).remaining).toEqual({
      requests: 0,
      resetMs: 30_000,
    });
    expect(read({ "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": String(NOW + 1500) }).remaining).toEqual({
      requests: 0,
      resetMs: 1500,
    });
  });

  it("ignores malformed values, and gives way to the IETF fields", () => {
    expect(read({ "X-RateLimit-Limit": "lots", "X-RateLimit-Remaining": "1.5", "X-RateLimit-Reset": "-3" })).toEqual(NO_SIGNALS);
    expect(read({ "X-RateLimit-Limit": "0" }).quota).toBeNull();
    expect(read({ "X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "soon" }).remaining).toEqual({ requests: 3, resetMs: null });
    expect(read({ "X-RateLimit-Limit": "50", "RateLimit-Policy": '"default";q=20;w=1' }).quota).toEqual({ requests: 20, windowMs: 1000 });
  });
});

describe("AnswerSignals", () => {
  it("collects one answer's headers however often they are reported, and says nothing when they say nothing", () => {
    const answer = new AnswerSignals();
    expect(answer.signals).toBeNull();
    answer.add({ "Content-Type": "application/json" });
    expect(answer.signals).toBeNull();
    answer.add(new Headers({ "X-RateLimit-Limit": "50" }));
    answer.add([["X-RateLimit-Remaining", "4"]]);
    expect(answer.signals).toMatchObject({ quota: { requests: 50 }, remaining: { requests: 4 } });
    // Not headers at all: nothing to read, nothing thrown.
    answer.add({ "bad name": "x" } as Record<string, string>);
    expect(answer.signals).toMatchObject({ quota: { requests: 50 } });
  });
});
