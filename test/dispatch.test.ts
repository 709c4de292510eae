/**
 * Tool dispatch end to end, in workerd with real objects: batching, dedupe,
 * pacing shared across runs, backpressure, and the receipt dispositions.
 * (The circuit breaker, salvage and auth-scope paths are in faults.test.ts.)
 */
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { AuthScopes } from "../src/runtime/tools/auth-scope";
import { receiptKey } from "../src/runtime/tools/receipt-keys";
import { receiptShardName } from "../src/clients/shards";
import { shardOf } from "../src/core/hash";
import { simFindEmail } from "../src/tools/sim-tools";
import { until } from "./chaos-helpers";
import { api, apiJson, datasetRows, expectedEmail, expectedVerdict, notices, simReset, simStats, startRun, waitForRun } from "./helpers";

const RECEIPT_SHARDS = 4;

async function setSim(config: Record<string, unknown>): Promise<void> {
  const res = await api("/v1/sim/config", { method: "PUT", json: config });
  expect(res.status).toBe(200);
}

async function setPacing(provider: string, override: Record<string, unknown> | null): Promise<void> {
  const res =
    override === null
      ? await api(`/v1/pacing/${provider}`, { method: "DELETE" })
      : await api(`/v1/pacing/${provider}`, { method: "PUT", json: override });
  expect(res.status).toBe(200);
}

afterEach(async () => {
  await setSim({ latencyMs: 0, ratePerSecond: null, batchMaxSize: 50 });
  await setPacing("sim", null);
});

describe("batching", () => {
  it("verifies 300 emails in a handful of batch calls, each member with its own result and bill", async () => {
    await simReset();
    const emails = Array.from({ length: 300 }, (_, i) => `batch.person${i}@example${i % 9}.com`);
    const rows = emails.map((email, i) => ({ id: `b${i}`, tool: "sim_verify_email", input: { email } }));
    const run = await waitForRun(await startRun("test-calls", { rows }));
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ total: 300, completed: 300, failed: 0 });

    const stats = await simStats();
    expect(stats.batchCalls).toBeGreaterThanOrEqual(6);
    expect(stats.batchCalls).toBeLessThanOrEqual(6 + 3);
    expect(stats.byTool.sim_verify_email.billed).toBe(300);
    expect(stats.duplicates).toBe(0);
    const stored = await datasetRows(run.runId, "calls");
    for (const [i, row] of stored.entries()) expect(row.out).toEqual({ email: emails[i], verdict: expectedVerdict(emails[i]!) });
  });

  it("gathers a chunk's verifications while its finds still answer: one batch of 50, not one per grace window", async () => {
    await simReset();
    // Six connections per executor at 300 ms: a chunk's 50 finds answer over ~2.5 s, ten grace windows.
    await setSim({ latencyMs: 300 });
    const rows = Array.from({ length: 100 }, (_, i) => ({ id: `g${i}`, name: `Gather Person ${i}`, domain: `gather${i % 7}.example` }));
    const runId = await startRun(
      "demo-enrich",
      { rows },
      // Leases long enough that a batch may gather for the whole chunk (a quarter of them).
      { testPolicy: { chunkRows: 50, rowLeaseTtlMs: 20_000, receiptLeaseTtlMs: 20_000 } },
    );
    const run = await waitForRun(runId);
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ rows: 100, failed: 0 });
    const stats = await simStats();
    expect(stats.batchCalls).toBe(2);
    expect(stats.byTool).toMatchObject({ sim_find_email: { calls: 100, billed: 100 }, sim_verify_email: { billed: 100 } });
    expect(stats.duplicates).toBe(0);
    for (const row of await datasetRows(runId, "leads")) {
      const email = expectedEmail(row.name as string, row.domain as string);
      expect(row).toMatchObject({ _status: "completed", email, verdict: expectedVerdict(email) });
    }
  });

  it("holds a gathering no longer than batchHoldMs: a chunk whose finds outlast it verifies in several batches", async () => {
    await simReset();
    // 50 finds six at a time at 300 ms: 2.7 s at least, past a 1 s hold twice.
    await setSim({ latencyMs: 300 });
    const rows = Array.from({ length: 50 }, (_, i) => ({ id: `h${i}`, name: `Hold Person ${i}`, domain: "hold.example" }));
    const runId = await startRun(
      "demo-enrich",
      { rows },
      { testPolicy: { chunkRows: 50, rowLeaseTtlMs: 20_000, receiptLeaseTtlMs: 20_000, batchHoldMs: 1_000 } },
    );
    const run = await waitForRun(runId);
    expect(run.result).toEqual({ rows: 50, failed: 0 });
    const stats = await simStats();
    expect(stats.batchCalls).toBeGreaterThanOrEqual(2);
    expect(stats.byTool).toMatchObject({ sim_find_email: { calls: 50, billed: 50 }, sim_verify_email: { billed: 50 } });
    expect(stats.duplicates).toBe(0);
  });

  it("sends nothing that was still gathering when the run is cancelled; a rerun verifies every row once", async () => {
    await simReset();
    // Six finds at a time, 500 ms each: the last finds answer 2 s or more after the 30th is sent, when the cancel goes.
    await setSim({ latencyMs: 500 });
    const rows = Array.from({ length: 50 }, (_, i) => ({ id: `c${i}`, name: `Cancel Gather ${i}`, domain: "gather.example" }));
    const testPolicy = { chunkRows: 50, rowLeaseTtlMs: 20_000, receiptLeaseTtlMs: 20_000 };
    const runId = await startRun("demo-enrich", { rows }, { testPolicy });
    // Many finds answered: their rows' verifications gather, waiting for the chunk's other finds.
    await until(
      () => simStats(),
      (stats) => (stats.byTool.sim_find_email?.calls ?? 0) >= 30,
      "30 finds sent",
    );
    expect((await api(`/v1/runs/${runId}/cancel`, { method: "POST" })).status).toBe(202);
    const cancelled = await waitForRun(runId);
    expect(cancelled.status).toBe("cancelled");
    const afterCancel = await simStats();
    expect(afterCancel.batchCalls).toBe(0);
    expect(afterCancel.byTool.sim_verify_email ?? { calls: 0, billed: 0 }).toEqual({ calls: 0, billed: 0 });

    await setSim({ latencyMs: 0 });
    const rerun = await waitForRun(await startRun("demo-enrich", { rows }, { testPolicy }));
    expect(rerun.result).toEqual({ rows: 50, failed: 0 });
    const stats = await simStats();
    // The finds the cancelled run paid for are reused; each row is found and verified once in all.
    expect(stats.byTool).toMatchObject({ sim_find_email: { billed: 50 }, sim_verify_email: { billed: 50 } });
    expect(stats.duplicates).toBe(0);
  });

  it("sends a member the provider refused on its own with a 503 again in a later batch: every row completes, billed once", async () => {
    await simReset();
    // Every fifth email is answered 503 the first time its key is seen, in a batch whose other members succeed.
    const emails = Array.from({ length: 60 }, (_, i) => (i % 5 === 0 ? `!unavailable.person${i}@example.com` : `person${i}@example.com`));
    const rows = emails.map((email, i) => ({ id: `u${i}`, tool: "sim_verify_email", input: { email } }));
    const run = await waitForRun(await startRun("test-calls", { rows, dataset: "unavailable" }));
    expect(run.result).toEqual({ total: 60, completed: 60, failed: 0 });
    expect(run.usage.providerRetries).toBe(12);
    const stored = await datasetRows(run.runId, "unavailable");
    for (const [i, row] of stored.entries()) expect(row.out).toEqual({ email: emails[i], verdict: expectedVerdict(emails[i]!) });
    const stats = await simStats();
    expect(stats.byTool.sim_verify_email.billed).toBe(60);
    expect(stats.duplicates).toBe(0);
  });

  it("fails only the members of a batch the provider refuses", async () => {
    await simReset();
    // A batch larger than the provider now accepts is a 400 for the whole batch; a lone call still succeeds.
    await setSim({ batchMaxSize: 5 });
    const rows = Array.from({ length: 12 }, (_, i) => ({
      id: `r${i}`,
      tool: "sim_verify_email",
      input: { email: `refused${i}@example.com` },
    }));
    const run = await waitForRun(await startRun("test-calls", { rows, dataset: "refused" }));
    expect(run.status).toBe("completed");
    expect(run.result).toMatchObject({ total: 12, failed: 12 });
    const stored = await datasetRows(run.runId, "refused");
    for (const row of stored) expect(row._error).toContain("invalid_request");
    expect((await simStats()).billed).toBe(0);
  });
});

describe("dedupe", () => {
  it("bills 100 rows making the same call once; every row gets the owner's result", async () => {
    await simReset();
    const input = { name: "Same Person", domain: "dedupe.test" };
    const rows = Array.from({ length: 100 }, (_, i) => ({ id: `d${i}`, tool: "sim_find_email", input }));
    const run = await waitForRun(await startRun("test-calls", { rows, dataset: "dedupe" }));
    expect(run.result).toEqual({ total: 100, completed: 100, failed: 0 });
    expect((await simStats()).byTool.sim_find_email).toEqual({ calls: 1, billed: 1 });
    for (const row of await datasetRows(run.runId, "dedupe")) expect(row.out).toEqual({ email: expectedEmail(input.name, input.domain) });
  });
});

describe("pacing across runs", () => {
  it("keeps two concurrent runs together under the provider's 20 requests/s, and both complete", async () => {
    await simReset();
    await setSim({ ratePerSecond: 20 });
    await setPacing("sim", { requestsPerSecond: 20 });
    const rowsOf = (run: string) =>
      Array.from({ length: 40 }, (_, i) => ({
        id: `${run}${i}`,
        tool: "sim_find_email",
        input: { name: `Paced ${run} ${i}`, domain: "pace.test" },
      }));
    const [a, b] = await Promise.all([
      startRun("test-calls", { rows: rowsOf("a"), dataset: "paced" }),
      startRun("test-calls", { rows: rowsOf("b"), dataset: "paced" }),
    ]);
    const [runA, runB] = await Promise.all([waitForRun(a, { timeoutMs: 60_000 }), waitForRun(b, { timeoutMs: 60_000 })]);
    expect([runA.status, runB.status]).toEqual(["completed", "completed"]);
    expect(runA.result.completed + runB.result.completed).toBe(80);

    // What the gate guarantees by construction: every request took a slot, and no second held more than the rate's slots.
    // (The rate the provider observed depends on timers and latency: it is measured by npm run bench, not asserted here.)
    const stats = await simStats();
    const gate = (await apiJson("/v1/pacing/sim")).body.state;
    expect(gate.slotsGranted).toBeGreaterThanOrEqual(stats.calls);
    expect(gate.maxSlotsPerSecond).toBeLessThanOrEqual(20);
    expect(stats.billed).toBe(80);
    expect(stats.duplicates).toBe(0);
  });

  it("goes on at a corrected rate: callers already waiting for a slot far off under the mistaken one hear of it", async () => {
    await simReset();
    // Declared at one request per 100 s by mistake: the calls wait up to 100 s between them (the first too, as the
    // last request of the tests before went out moments ago).
    await setPacing("sim", { requestsPerSecond: 0.01 });
    const rows = Array.from({ length: 10 }, (_, i) => ({
      id: `m${i}`,
      tool: "sim_find_email",
      input: { name: `Mistaken Rate ${i}`, domain: "mistake.test" },
    }));
    const runId = await startRun("test-calls", { rows, dataset: "mistaken-rate" });
    // The executor's pacer has asked the gate (it holds units of the provider's concurrency) and been told to wait.
    await until(
      () => apiJson("/v1/pacing/sim"),
      (res) => res.body.state.holders > 0,
      "the run's calls to ask the gate",
    );
    await setPacing("sim", { requestsPerSecond: 50 });
    // Before the correction reached waiting callers, they waited for their slots at the old pace: past this wait.
    const run = await waitForRun(runId, { timeoutMs: 30_000 });
    expect(run.result).toEqual({ total: 10, completed: 10, failed: 0 });
    const stats = await simStats();
    expect(stats.billed).toBe(10);
    expect(stats.duplicates).toBe(0);
  });

  it("slows every caller after a 429 with Retry-After when the gate does not know the limit", async () => {
    await simReset();
    await setSim({ ratePerSecond: 20 });
    const rows = Array.from({ length: 60 }, (_, i) => ({
      id: `p${i}`,
      tool: "sim_find_email",
      input: { name: `Pushed Back ${i}`, domain: "backpressure.test" },
    }));
    const run = await waitForRun(await startRun("test-calls", { rows, dataset: "pushback" }), { timeoutMs: 60_000 });
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ total: 60, completed: 60, failed: 0 });
    const stats = await simStats();
    expect(stats.rateLimited).toBeGreaterThan(0);
    expect(stats.billed).toBe(60);
    expect(stats.duplicates).toBe(0);
    // Every 429 was retried in process and counted; the gate learned a rate from them.
    expect(run.usage.rateLimited).toBe(stats.rateLimited);
    expect(run.usage.providerRetries).toBeGreaterThanOrEqual(stats.rateLimited);
    const gate = await apiJson("/v1/pacing/sim");
    expect(gate.body.state.backpressureReports).toBeGreaterThan(0);
    expect(gate.body.state.learnedRequestsPerSecond).not.toBeNull();
  });

  it("validates a pacing override", async () => {
    const bad = await apiJson("/v1/pacing/sim", { method: "PUT", json: { requestsPerSecond: -1 } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe("invalid_request");
    // Slower than one request per 100 s is not a rate to pace by (its next slot would be hours away).
    expect((await apiJson("/v1/pacing/sim", { method: "PUT", json: { requestsPerSecond: 0.001 } })).status).toBe(400);
    const state = await apiJson("/v1/pacing/sim");
    expect(state.body.policy).toEqual({ requestsPerSecond: null, concurrency: 256, batchParallelism: 4 });
  });
});

describe("receipt dispositions", () => {
  /** Leaves a `running` receipt for `input` of sim_find_email, owned by `owner`, with a long lease. */
  async function leaveRunning(input: { name: string; domain: string }, owner: { runId: string; attemptSeq: number }) {
    const scope = await new AuthScopes({ env }).digest(simFindEmail);
    const key = await receiptKey({ org: "dev", toolId: "sim_find_email", toolVersion: "1", input, authScope: scope });
    const stub = env.RECEIPT_SHARD.getByName(receiptShardName("dev", shardOf(key, RECEIPT_SHARDS)));
    const attempt = { attemptId: `${owner.runId}/items/0/${owner.attemptSeq}`, ...owner };
    const [claim] = (await stub.claim({ attempt, leaseTtlMs: 3_600_000, refresh: false, items: [{ key, toolId: "sim_find_email" }] }))
      .results;
    expect(claim?.disposition).toBe("claimed");
  }

  it("takes over at once a receipt left running by a run that no longer exists", async () => {
    await simReset();
    const input = { name: "Orphaned Call", domain: "dead.test" };
    await leaveRunning(input, { runId: "run_00000000000000000000000000dead01", attemptSeq: 0 });
    const run = await waitForRun(await startRun("test-calls", { rows: [{ id: "o1", tool: "sim_find_email", input }], dataset: "orphan" }));
    expect(run.result).toEqual({ total: 1, completed: 1, failed: 0 });
    expect(await notices(run.runId)).toContain("receipt_taken_over");
    expect((await simStats()).billed).toBe(1);
  });

  it("waits for a live owner up to the receipt wait, then takes over", async () => {
    await simReset();
    await setSim({ latencyMs: 200 });
    // A live run to own the receipt: long enough to outlast the test's receipt wait (1 s). One executor's six
    // connections at 200 ms take 10 s over its 300 rows, computing few of them while the test runs.
    const owner = await startRun(
      "test-map",
      { rows: Array.from({ length: 300 }, (_, i) => ({ id: `live${i}`, name: `Live Owner ${i}`, domain: "live.test" })) },
      { testPolicy: { minExecutors: 1, maxExecutors: 1 } },
    );
    try {
      for (;;) {
        const { body } = await apiJson(`/v1/runs/${owner}`);
        if (body.status === "running") break;
        await new Promise((r) => setTimeout(r, 10));
      }
      const input = { name: "Busy Call", domain: "live.test" };
      await leaveRunning(input, { runId: owner, attemptSeq: 0 });
      const run = await waitForRun(await startRun("test-calls", { rows: [{ id: "w1", tool: "sim_find_email", input }], dataset: "busy" }));
      expect(run.result).toEqual({ total: 1, completed: 1, failed: 0 });
      expect(await notices(run.runId)).toContain("receipt_taken_over");
      expect((await apiJson(`/v1/runs/${owner}`)).body.status).toBe("running");
    } finally {
      await api(`/v1/runs/${owner}/cancel`, { method: "POST" });
      await waitForRun(owner);
    }
  });
});
