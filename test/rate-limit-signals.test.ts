/**
 * Providers' own rate-limit signals: how a failure is classified (a tool's
 * `isRateLimit` included), and, end to end in workerd, runs against the
 * simulator stating its limit in headers (`ietf`, `x-ratelimit`) and a tool
 * whose provider answers 403 when rate limited.
 */
import { afterEach, describe, expect, it } from "vitest";
import { classifyFailure } from "../src/runtime/tools/provider-call";
import { ToolCallError } from "../src/play/tool-error";
import { api, apiJson, simReset, simStats, startRun, waitForRun } from "./helpers";

async function setSim(config: Record<string, unknown>): Promise<void> {
  expect((await api("/v1/sim/config", { method: "PUT", json: config })).status).toBe(200);
}

/** Back to the default pacing, with everything the gate learned forgotten: its next request probes the provider. */
async function freshGate(): Promise<void> {
  expect((await api("/v1/pacing/sim", { method: "DELETE" })).status).toBe(200);
}

afterEach(async () => {
  await setSim({ latencyMs: 0, ratePerSecond: null, batchMaxSize: 50, rateLimitHeaders: "retry-after" });
  await freshGate();
});

describe("classifying a failure", () => {
  const forbidden = new ToolCallError({
    code: "too_many_requests",
    message: "slow down",
    retryable: false,
    status: 403,
    headers: { "Retry-After": "2" },
  });
  const isRateLimit = (error: unknown) => error instanceof ToolCallError && error.status === 403;

  it("takes a failure the tool's hook reads as a rate limit for one, with the wait its headers ask for", () => {
    expect(classifyFailure(forbidden, isRateLimit)).toEqual({
      error: { code: "too_many_requests", message: "slow down" },
      retryable: true,
      retry: { kind: "rate_limited", retryAfterMs: 2000 },
    });
    expect(classifyFailure(new Error("403 from a helper"), () => true)).toMatchObject({
      error: { code: "tool_error" },
      retryable: true,
      retry: { kind: "rate_limited", retryAfterMs: null },
    });
  });

  it("leaves the failure as the error says without the hook, or when the hook says no or throws", () => {
    expect(classifyFailure(forbidden)).toMatchObject({ retryable: false, retry: { kind: "permanent" } });
    expect(classifyFailure(forbidden, () => false)).toMatchObject({ retry: { kind: "permanent" } });
    const broken = () => {
      throw new Error("hook bug");
    };
    expect(classifyFailure(forbidden, broken)).toMatchObject({ retry: { kind: "permanent" } });
  });

  it("reads a 429 status, or a Retry-After in the error's headers, as a rate limit", () => {
    expect(classifyFailure(new ToolCallError({ code: "http_429", message: "", retryable: true, status: 429 })).retry).toEqual({
      kind: "rate_limited",
      retryAfterMs: null,
    });
    const withHeaders = new ToolCallError({
      code: "busy",
      message: "",
      retryable: true,
      headers: new Headers({ "Retry-After-Ms": "350" }),
    });
    expect(classifyFailure(withHeaders).retry).toEqual({ kind: "rate_limited", retryAfterMs: 350 });
    expect(classifyFailure(new ToolCallError({ code: "http_503", message: "", retryable: true, status: 503 })).retry).toEqual({
      kind: "transient",
    });
  });
});

const findRows = (prefix: string, count: number, tool = "sim_find_email") =>
  Array.from({ length: count }, (_, i) => ({
    id: `${prefix}${i}`,
    tool,
    input: { name: `Signalled ${prefix} ${i}`, domain: "signals.test" },
  }));

describe("a provider announcing its limit", () => {
  for (const style of ["ietf", "x-ratelimit"] as const) {
    it(`paces a run by the quota announced in ${style} headers from its first request: every row once, next to no 429s`, async () => {
      await simReset();
      await setSim({ ratePerSecond: 10, rateLimitHeaders: style });
      await freshGate();
      const run = await waitForRun(await startRun("test-calls", { rows: findRows(style, 30), dataset: `announced-${style}` }), {
        timeoutMs: 60_000,
      });
      expect(run.status).toBe("completed");
      expect(run.result).toEqual({ total: 30, completed: 30, failed: 0 });
      const stats = await simStats();
      expect(stats.billed).toBe(30);
      expect(stats.duplicates).toBe(0);

      // By construction: one probe learns the quota before any burst, every request then takes a slot, and no
      // second holds more slots than the quota. What 429s remain come from delivery jitter alone (and each is retried):
      // a request that reaches the provider late, on a loaded machine, shares its window with the next second's. A
      // burst sent before the quota was known would have most of its 30 answered 429.
      const gate = (await apiJson("/v1/pacing/sim")).body.state;
      expect(gate).toMatchObject({ heard: true, announcedRequestsPerSecond: 10 });
      expect(gate.slotsGranted).toBeGreaterThanOrEqual(stats.calls);
      expect(gate.maxSlotsPerSecond).toBeLessThanOrEqual(10);
      expect(stats.rateLimited).toBeLessThanOrEqual(stats.calls / 5);
      expect(run.usage.rateLimited).toBe(stats.rateLimited);
    });
  }
});

describe("a provider answering 403 when rate limited", () => {
  it("retries the 403 its tool reads as a rate limit, slows every caller, and bills each call once", async () => {
    await simReset();
    await setSim({ ratePerSecond: 5 });
    await freshGate();
    const run = await waitForRun(
      await startRun("test-calls", { rows: findRows("forbidden", 20, "test_403_limited_find"), dataset: "forbidden" }),
      { timeoutMs: 60_000 },
    );
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ total: 20, completed: 20, failed: 0 });
    const stats = await simStats();
    // The first burst outruns 5 a second: those answers come back 403, and each is retried rather than failing its row.
    expect(stats.rateLimited).toBeGreaterThan(0);
    expect(stats.billed).toBe(20);
    expect(stats.duplicates).toBe(0);
    expect(run.usage.rateLimited).toBe(stats.rateLimited);
    expect(run.usage.providerRetries).toBeGreaterThanOrEqual(stats.rateLimited);
    const gate = (await apiJson("/v1/pacing/sim")).body.state;
    expect(gate.backpressureReports).toBeGreaterThan(0);
    expect(gate.learnedRequestsPerSecond).not.toBeNull();
  });
});
