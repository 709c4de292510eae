/**
 * Recovery lookups (a tool's `recover`, asking the provider how a request whose
 * outcome is unknown ended) are provider requests: paced by the provider's
 * rate like calls (however many at once), what their answers say of the
 * provider's limit reaches its gate, and a 429 to one is a rate limit to
 * wait out, not an unknown outcome; nor is a 5xx, asked again after a backoff.
 */
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { FAULT_OBJECT_NAME } from "../src/clients/faults";
import { clearFaults, faultState, setFaults, until } from "./chaos-helpers";
import { api, apiJson, datasetRows, expectedEmail, simReset, simStats, startRun, waitForRun } from "./helpers";

async function setSim(config: Record<string, unknown>): Promise<void> {
  expect((await api("/v1/sim/config", { method: "PUT", json: config })).status).toBe(200);
}

afterEach(async () => {
  await clearFaults();
  await setSim({ latencyMs: 0, ratePerSecond: null, rateLimitHeaders: "retry-after" });
  expect((await api("/v1/pacing/sim", { method: "DELETE" })).status).toBe(200);
});

/** Rows of a provider that ignores idempotency keys and answers lookups: each request is cut off, then looked up. */
const lookupRows = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, i) => ({
    id: `${prefix}${i}`,
    tool: "test_unkeyed_lookup_find",
    input: { name: `${prefix} Person ${i}`, domain: "lookup.test" },
  }));

/**
 * The call's answer never reaches the run, as the provider timeout cuts it off, once the provider has executed (and
 * billed) it: a fault, not a short timeout against the simulator's latency, which would race the provider's
 * reading of the request (a provider that had not read it when the run gave up never executes it, and a loaded
 * machine can take longer than a short timeout to deliver it).
 */
const lostAnswer = {
  point: "provider.after",
  tool: "test_unkeyed_lookup_find",
  times: 1,
  error: { code: "provider_timeout", message: "the provider did not answer in time (test fault)" },
} as const;

/** The run's one row got its answer through a lookup: stored, sent once and billed once, no outcome unknown. */
async function expectRecovered(run: Awaited<ReturnType<typeof waitForRun>>, dataset: string, rows: ReturnType<typeof lookupRows>) {
  expect(run.result).toEqual({ total: 1, completed: 1, failed: 0 });
  const [row] = await datasetRows(run.runId, dataset);
  expect(row.out).toEqual({ email: expectedEmail(rows[0]!.input.name, rows[0]!.input.domain) });
  expect(run.usage).toMatchObject({ providerRequests: 1, outcomeUnknown: 0 });
  expect(await simStats()).toMatchObject({ calls: 1, billed: 1, duplicates: 0 });
}

describe("recovery lookups", () => {
  it("wait out a 429 and ask again: the row gets its answer, not outcome_unknown", async () => {
    await simReset();
    // One request a second: the lookup right after the call is answered 429 with its Retry-After.
    await setSim({ ratePerSecond: 1 });
    await setFaults([lostAnswer]);
    const rows = lookupRows("Limited", 1);
    const runId = await startRun("test-calls", { rows, dataset: "limited-lookups" });
    const run = await waitForRun(runId);
    await expectRecovered(run, "limited-lookups", rows);
    expect(run.usage.rateLimited).toBeGreaterThan(0);
  });

  it("wait for a request still being answered from their first answer, not from a lookup held back before it", async () => {
    await simReset();
    // The call is cut off at 1 s and answered at 5 s. Its first lookup is held back 3 s (as a slot's wait or 429s
    // waited out would), past the 2 s receipt wait, then finds the request still being answered: the wait for it
    // starts there, and the row gets its answer.
    await setSim({ latencyMs: 5_000 });
    await setFaults([{ point: "provider.lookup", tool: "test_unkeyed_lookup_find", times: 1, hold: true }]);
    const rows = lookupRows("Held", 1);
    const runId = await startRun(
      "test-calls",
      { rows, dataset: "held-lookups" },
      { testPolicy: { providerTimeoutMs: 1_000, receiptWaitMs: 2_000 } },
    );
    await until(faultState, (state) => state.counts[0] === 1, "the first lookup held");
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    await env.FAULTS!.getByName(FAULT_OBJECT_NAME).release(0);
    const run = await waitForRun(runId);
    await expectRecovered(run, "held-lookups", rows);
    expect(run.usage.providerLookups).toBeGreaterThan(1);
  });

  it("tell the gate what their answers say of the provider's quota", async () => {
    await simReset();
    // Every call is cut off by the provider timeout before its answer: only the lookups' answers bring the quota's
    // headers. The timeout leaves the provider ample time to read each request (one it has not read when the run gives
    // up is never executed), the lookups ample time to wait for the answers (faults.test.ts, "does not answer in time").
    await setSim({ latencyMs: 1_000, ratePerSecond: 50, rateLimitHeaders: "x-ratelimit" });
    const rows = lookupRows("Quota", 2);
    const runId = await startRun(
      "test-calls",
      { rows, dataset: "quota-lookups" },
      { testPolicy: { providerTimeoutMs: 300, receiptWaitMs: 5_000 } },
    );
    const run = await waitForRun(runId);
    expect(run.result).toEqual({ total: 2, completed: 2, failed: 0 });
    expect(run.usage.providerLookups).toBeGreaterThan(0);
    const gate = (await apiJson("/v1/pacing/sim")).body.state;
    expect(gate).toMatchObject({ heard: true, announcedRequestsPerSecond: 50 });
  });

  it("ask again after a 5xx: the row gets its answer, not outcome_unknown", async () => {
    await simReset();
    // The call's answer is lost; the provider's first answer to a lookup is a 503.
    await setFaults([
      lostAnswer,
      {
        point: "provider.lookup",
        tool: "test_unkeyed_lookup_find",
        times: 1,
        error: { code: "service_unavailable", message: "provider answered HTTP 503", retryable: true },
      },
    ]);
    const rows = lookupRows("Unavailable", 1);
    const runId = await startRun("test-calls", { rows, dataset: "unavailable-lookups" });
    const run = await waitForRun(runId);
    await expectRecovered(run, "unavailable-lookups", rows);
    expect(run.usage.providerRetries).toBeGreaterThan(0);
  });

  it("of many calls taken over at once keep to the provider's declared rate: every row once, none sent twice", async () => {
    await simReset();
    await setSim({ latencyMs: 50, ratePerSecond: 10 });
    expect((await api("/v1/pacing/sim", { method: "PUT", json: { requestsPerSecond: 10 } })).status).toBe(200);
    // The executor dies after its second call: the receipts its rows claimed (most still waiting for slots) are all
    // taken over by the next invocation at once, each looked up before it is sent again.
    await setFaults([{ point: "provider.after", fromCall: 2, times: 1, crash: true }]);
    const rows = Array.from({ length: 40 }, (_, i) => ({
      id: `Takeover${i}`,
      tool: "sim_find_email",
      input: { name: `Takeover Person ${i}`, domain: "takeover.test" },
    }));
    const runId = await startRun("test-calls", { rows, dataset: "takeover-lookups" });
    const run = await waitForRun(runId, { timeoutMs: 60_000 });
    expect(run.result).toEqual({ total: 40, completed: 40, failed: 0 });
    expect(run.usage.providerLookups).toBeGreaterThanOrEqual(20);
    // No lookup ran out of retries on 429s, so no call went out again with its key.
    const stats = await simStats();
    expect(stats).toMatchObject({ billed: 40, duplicates: 0 });
    // Every lookup took a slot of the gate's schedule, and no second held more than the rate's.
    const gate = (await apiJson("/v1/pacing/sim")).body.state;
    expect(gate.slotsGranted).toBeGreaterThanOrEqual(stats.calls + run.usage.providerLookups);
    expect(gate.maxSlotsPerSecond).toBeLessThanOrEqual(10);
    // What 429s remain come from delivery jitter alone, as for calls (rate-limit-signals.test.ts): a request that
    // reaches the provider late shares its window with the next second's. Lookups sent unpaced made 232 of 250.
    expect(stats.rateLimited).toBeLessThanOrEqual((stats.calls + run.usage.providerLookups) / 5);
  });
});
