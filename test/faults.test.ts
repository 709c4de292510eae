/**
 * Never bill into a broken store: the fault seam fails named operations, and
 * the engine must stop dispatching, keep what was billed, and let a rerun
 * make every remaining call exactly once. Also the in-process retries and
 * the auth-scope re-claim, driven by provider faults.
 */
import { abortAllDurableObjects } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { FAULT_OBJECT_NAME } from "../src/clients/faults";
import {
  allEvents,
  api,
  apiJson,
  datasetRows,
  eventsOfType,
  expectedEmail,
  notices,
  runView,
  simReset,
  simStats,
  startRun,
  waitForRun,
} from "./helpers";
import { clearFaults, setFaults, until } from "./chaos-helpers";

/** The test policy's dispatch window (src/core/policy.ts): what a broken store may cost at most. */
const WAVE = 25;
/** The executors a map starts with under the test policy (minExecutors), which a provider answering at once keeps it at. */
const EXECUTORS = 4;

const injector = () => env.FAULTS!.getByName(FAULT_OBJECT_NAME);

const findRows = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, i) => ({
    id: `${prefix}${i}`,
    tool: "sim_find_email",
    input: { name: `${prefix} Person ${i}`, domain: "faults.test" },
  }));

afterEach(async () => {
  await api("/v1/test/faults", { method: "DELETE" });
});

describe("the fault seam", () => {
  it("is validated, counts calls per operation, and clears", async () => {
    const bad = await apiJson("/v1/test/faults", { method: "PUT", json: { rules: [{ point: "nowhere" }] } });
    expect(bad.status).toBe(400);
    await setFaults([{ point: "receipt.claim", fromCall: 1000 }]);
    await waitForRun(await startRun("test-calls", { rows: findRows("Seam", 3), dataset: "seam" }));
    const state = (await apiJson("/v1/test/faults")).body;
    expect(state.plan.rules).toHaveLength(1);
    expect(state.hits["receipt.claim"]).toBeGreaterThanOrEqual(1);
    const cleared = (await apiJson("/v1/test/faults", { method: "DELETE" })).body;
    expect(cleared).toMatchObject({ plan: { rules: [] }, hits: {} });
  });
});

describe("the persistence circuit breaker", () => {
  it("stops billing after a receipt completion fails, salvages what was billed, and a rerun bills each remaining call once", async () => {
    await simReset();
    const rows = findRows("Breaker", 200);
    await setFaults([{ point: "receipt.complete", fromCall: 3 }]);
    const runId = await startRun("test-calls", { rows, dataset: "breaker" });
    const run = await waitForRun(runId);
    expect(run.status).toBe("failed");
    expect(run.error.code).toBe("receipt_store_failed");
    const prevented = Number(/prevented (\d+) provider calls/.exec(run.error.message)?.[1]);
    expect(prevented).toBeGreaterThan(0);

    // What was billed after the first failed completion is at most one wave per executor (each trips its own
    // latch at its first failure, and the coordinator then stops the others), and every output is salvaged exactly.
    const billed = (await simStats()).billed;
    expect(billed).toBeLessThan(200);
    const salvage = run.error.salvage;
    expect(salvage.total).toBeGreaterThan(0);
    expect(salvage.total).toBeLessThanOrEqual(WAVE * EXECUTORS);
    const byName = new Map(rows.map((r) => [expectedEmail(r.input.name, r.input.domain), r]));
    for (const entry of salvage.entries) {
      expect(entry.toolId).toBe("sim_find_email");
      expect(byName.has(entry.output.email)).toBe(true);
    }
    const failed = (await allEvents(runId)).at(-1);
    expect(failed).toMatchObject({ type: "run.failed", error: { code: "receipt_store_failed", salvage: { total: salvage.total } } });

    // Once the store works again the finished run writes its salvage into the receipts (by its alarm)...
    await api("/v1/test/faults", { method: "DELETE" });
    await until(
      () => allEvents(runId),
      (events) => events.some((e) => e.type === "salvage.restored"),
      "the salvage to be restored",
    );

    // ...and a rerun makes every remaining call exactly once.
    const rerun = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST" });
    const done = await waitForRun(rerun.body.runId);
    expect(done.result).toEqual({ total: 200, completed: 200, failed: 0 });
    const stats = await simStats();
    expect(stats.billed).toBe(200);
    expect(stats.duplicates).toBe(0);
    const stored = await datasetRows(rerun.body.runId, "breaker");
    for (const [i, row] of stored.entries()) expect(row.out).toEqual({ email: expectedEmail(rows[i]!.input.name, rows[i]!.input.domain) });
  });

  it("keeps its decision when the coordinator dies carrying it out: the next invocation finishes it and sends nothing", async () => {
    await simReset();
    // The breaker decides the run fails; the coordinator then dies once it recorded that, before it ended the run.
    await setFaults([
      { point: "receipt.complete", fromCall: 3 },
      { point: "run.finish", hold: true, times: 1 },
    ]);
    const runId = await startRun("test-calls", { rows: findRows("Ending", 200), dataset: "ending" });
    await injector().held(1);
    const sent = (await simStats()).calls;
    await abortAllDurableObjects();
    // It ran the play again (its leases released and fenced, the store healed or not) and sent more.
    const run = await waitForRun(runId);
    expect(run.status).toBe("failed");
    expect(run.error.code).toBe("receipt_store_failed");
    expect((await simStats()).calls).toBe(sent);
    expect((await allEvents(runId)).filter((e) => e.type === "run.failed")).toHaveLength(1);
    const resumed = eventsOfType(await allEvents(runId), "log.appended").filter((e) => e.code === "invocation_resumed");
    expect(resumed.map((e) => e.line)).toEqual([expect.stringContaining("finishing the run's end (failed)")]);
  });

  it("makes no provider call when receipt claims fail, and a rerun completes", async () => {
    await simReset();
    const rows = findRows("Claimless", 60);
    await setFaults([{ point: "receipt.claim" }]);
    const run = await waitForRun(await startRun("test-calls", { rows, dataset: "claimless" }));
    expect(run.status).toBe("failed");
    expect(run.error.code).toBe("receipt_store_failed");
    expect(run.error.message).toContain("could not claim");
    expect((await simStats()).calls).toBe(0);
    await api("/v1/test/faults", { method: "DELETE" });
    const rerun = await waitForRun(await startRun("test-calls", { rows, dataset: "claimless" }));
    expect(rerun.result).toEqual({ total: 60, completed: 60, failed: 0 });
    expect(await simStats()).toMatchObject({ billed: 60, duplicates: 0 });
  });

  it("fails the run when rows cannot be persisted; a rerun reuses every billed receipt", async () => {
    await simReset();
    const rows = findRows("Sheetless", 80);
    await setFaults([{ point: "sheet.persist" }]);
    const run = await waitForRun(await startRun("test-calls", { rows, dataset: "sheetless" }));
    expect(run.status).toBe("failed");
    expect(run.error.code).toBe("sheet_store_failed");
    const billed = (await simStats()).billed;
    expect(billed).toBeGreaterThan(0);
    await api("/v1/test/faults", { method: "DELETE" });
    const rerun = await waitForRun(await startRun("test-calls", { rows, dataset: "sheetless" }));
    expect(rerun.result).toEqual({ total: 80, completed: 80, failed: 0 });
    expect(await simStats()).toMatchObject({ billed: 80, duplicates: 0 });
  });
});

describe("provider failures", () => {
  it("retries a retryable failure in process, counts the retry, and bills once", async () => {
    await simReset();
    await setFaults([{ point: "provider.before", fromCall: 2, times: 2, error: { code: "provider_unavailable", retryable: true } }]);
    const run = await waitForRun(await startRun("test-calls", { rows: findRows("Retry", 5), dataset: "retry" }));
    expect(run.result).toEqual({ total: 5, completed: 5, failed: 0 });
    expect(run.usage.providerRetries).toBe(2);
    expect(await simStats()).toMatchObject({ billed: 5, duplicates: 0 });
  });

  it("fails only the members of the batch whose request failed", async () => {
    await simReset();
    await setFaults([{ point: "provider.before", tool: "sim_verify_email", fromCall: 1, times: 1, error: { code: "batch_refused" } }]);
    const rows = Array.from({ length: 150 }, (_, i) => ({
      id: `v${i}`,
      tool: "sim_verify_email",
      input: { email: `isolated${i}@example.com` },
    }));
    const run = await waitForRun(await startRun("test-calls", { rows, dataset: "isolated" }));
    expect(run.status).toBe("completed");
    const stored = await datasetRows(run.runId, "isolated");
    const failed = stored.filter((r) => r._status === "failed");
    // One batch (at most 50 members) failed; every other batch's members have their own results.
    expect(failed.length).toBeGreaterThan(1);
    expect(failed.length).toBeLessThanOrEqual(50);
    for (const row of failed) expect(row._error).toContain("batch_refused");
    const stats = await simStats();
    expect(stats.billed).toBe(150 - failed.length);
    expect(stats.batchCalls).toBeGreaterThanOrEqual(2);
  });

  it("fails a row on a permanent failure, and remembers it", async () => {
    await simReset();
    await setFaults([{ point: "provider.before", fromCall: 1, times: 1, error: { code: "account_suspended" } }]);
    const run = await waitForRun(await startRun("test-calls", { rows: findRows("Permanent", 1), dataset: "permanent" }));
    expect(run.result).toEqual({ total: 1, completed: 0, failed: 1 });
    expect((await datasetRows(run.runId, "permanent"))[0]._error).toContain("account_suspended");
    expect(run.usage.providerRetries).toBe(0);
  });

  it("asks again with the same idempotency key when a response is lost after billing: billed once", async () => {
    await simReset();
    await setFaults([{ point: "provider.after", fromCall: 1, times: 1, error: { code: "connection_reset", retryable: true } }]);
    const run = await waitForRun(await startRun("test-calls", { rows: findRows("Lost", 1), dataset: "lost" }));
    expect(run.result).toEqual({ total: 1, completed: 1, failed: 0 });
    // The provider replays the billed key (the simulator counts the replay as a duplicate); it bills once.
    expect(await simStats()).toMatchObject({ billed: 1, calls: 2, duplicates: 1 });
  });
});

/**
 * A provider that has not read a request when the run's timeout cuts it off never executes it (the simulator cannot
 * read a body whose sender went away), so these tests give it a timeout long enough to read every request on a
 * loaded machine (at 100 ms, one in many runs had a request cut off unread), and answers well after it.
 */
const TIMEOUT_MS = 300;
const LATE_MS = 1_000;

describe("a provider that does not answer in time", () => {
  afterEach(async () => {
    await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 0 } });
  });

  it("has each request stopped at the provider timeout and retried under the same key; the row fails retryably, billed once", async () => {
    await simReset();
    // Every answer comes after a second; the run stops waiting at 300 ms.
    await api("/v1/sim/config", { method: "PUT", json: { latencyMs: LATE_MS } });
    const runId = await startRun(
      "test-calls",
      { rows: findRows("Hang", 2), dataset: "hang" },
      { testPolicy: { providerTimeoutMs: TIMEOUT_MS } },
    );
    const run = await waitForRun(runId);

    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ total: 2, completed: 0, failed: 2 });
    const stored = await datasetRows(runId, "hang");
    for (const row of stored) expect(row._error).toContain("provider_timeout");
    // Each row's call went out once and was retried to the policy's limit (4 attempts), never under a new key.
    expect(run.usage.providerRetries).toBe(2 * 3);
    // Every attempt reached the provider, which answered them all in the end (nobody was waiting by then): the
    // first request of each row billed it, the three after it under the same key were replays.
    const stats = await until(simStats, (s) => s.calls === 8 && s.billed + s.duplicates === 8, "the stopped requests answered");
    expect(stats.billed).toBe(2);
    expect(stats.duplicates).toBe(6);
  });

  const unkeyedRows = (tool: string, prefix: string) => findRows(prefix, 2).map((row) => ({ ...row, tool }));

  it("has a request to a provider that ignores idempotency keys stopped once, not sent again: its row fails outcome_unknown", async () => {
    await simReset();
    await api("/v1/sim/config", { method: "PUT", json: { latencyMs: LATE_MS } });
    const rows = unkeyedRows("test_unkeyed_find", "Unkeyed");
    const runId = await startRun("test-calls", { rows, dataset: "unkeyed-hang" }, { testPolicy: { providerTimeoutMs: TIMEOUT_MS } });
    const run = await waitForRun(runId);
    expect(run.result).toEqual({ total: 2, completed: 0, failed: 2 });
    for (const row of await datasetRows(runId, "unkeyed-hang"))
      expect(row._error).toMatch(/^outcome_unknown: .*did not answer within 300 ms/);
    expect(run.usage).toMatchObject({ providerRequests: 2, providerRetries: 0, outcomeUnknown: 2 });
    // Sent again, each would have executed (and billed) twice at a provider that ignores the key.
    const stats = await until(simStats, (s) => s.billed === 2, "the stopped requests answered");
    expect(stats).toMatchObject({ calls: 2, duplicates: 0 });

    // A rerun asked to sends them again.
    await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 0 } });
    const retried = await waitForRun(
      (await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST", json: { retryUnknown: true } })).body.runId,
    );
    expect(retried.result).toEqual({ total: 2, completed: 2, failed: 0 });
    expect(retried.usage.providerRequests).toBe(2);
  });

  it("asks a provider that ignores idempotency keys for a timed-out request's answer, and stores it without sending again", async () => {
    await simReset();
    await api("/v1/sim/config", { method: "PUT", json: { latencyMs: LATE_MS } });
    const rows = unkeyedRows("test_unkeyed_lookup_find", "Looked");
    // The lookup finds each request still being answered, and waits (within the receipt wait) for its answer.
    const runId = await startRun(
      "test-calls",
      { rows, dataset: "unkeyed-lookup" },
      { testPolicy: { providerTimeoutMs: TIMEOUT_MS, receiptWaitMs: 5_000 } },
    );
    const run = await waitForRun(runId);
    expect(run.result).toEqual({ total: 2, completed: 2, failed: 0 });
    const stored = await datasetRows(runId, "unkeyed-lookup");
    expect(stored.map((row) => row.out)).toEqual(rows.map((row) => ({ email: expectedEmail(row.input.name, row.input.domain) })));
    expect(run.usage).toMatchObject({ providerRequests: 2, providerRetries: 0, outcomeUnknown: 0 });
    expect(run.usage.providerLookups).toBeGreaterThan(0);
    expect(run.usage.spend.total).toBe(2);
    expect(await simStats()).toMatchObject({ calls: 2, billed: 2, duplicates: 0 });
  });
});

/**
 * What an attempt the coordinator gave up on (its end waited past the stop's grace) reports at last: the salvage of
 * one billed output (`name`, in map `map`), and nothing else: no bill (that went out in an earlier heartbeat).
 */
function salvageReport(runId: string, name: string, map: string, output: unknown = { email: `${name}@faults.test` }) {
  const attempt = { attemptId: `${name}-attempt`, runId, attemptSeq: 1 };
  const entry = { receiptKey: `${name}-receipt`, toolId: "sim_find_email", attempt, output };
  return env.RUN_COORDINATOR.getByName(runId).attemptReport({
    executor: `${name}-executor`,
    attemptId: attempt.attemptId,
    map,
    chunk: 0,
    rows: { started: 0, completed: 0, failed: 0, stopped: 0 },
    logs: [],
    bills: [],
    salvage: [{ ...entry, completeAttempts: 3, error: "receipt shard overloaded", at: Date.now() }],
    usage: { rpc: 0, provider: 0, retries: 0, rateLimited: 0, lookups: 0, outcomeUnknown: 0, rpcByKind: {} },
    latency: [],
    waiting: [],
    draining: false,
    end: null,
  });
}

describe("salvage that reaches a run after its end", () => {
  it("wakes the ended run, whose alarm writes it into its receipt (else a rerun pays for that output again)", async () => {
    const runId = await startRun("test-calls", { rows: findRows("Late", 2), dataset: "late-salvage" });
    expect((await waitForRun(runId)).status).toBe("completed");
    await salvageReport(runId, "late", "late-salvage");
    const events = await until(
      () => allEvents(runId),
      (all) => all.some((e) => e.type === "salvage.restored"),
      "the late salvage to be written back",
    );
    expect(events.find((e) => e.type === "salvage.restored")).toMatchObject({ total: 1 });
  });
});

describe("salvage of large outputs on a run that fails", () => {
  it("lists the entries whose outputs fit; the run's error, one stored value, stays under SQLite's 2 MB", async () => {
    // Its wait fails the run once the reports are in (they take ~200 ms here; one applied after the end is not listed).
    const runId = await startRun("test-waits", { keys: ["never-sent"], timeoutMs: 4000 });
    await salvageReport(runId, "small", "large-salvage");
    // Each entry's output alone is a quarter of the limit: listed whole, the error could never be stored, nor the run end.
    for (let i = 0; i < 5; i++) await salvageReport(runId, `large-${i}`, "large-salvage", { padding: "x".repeat(450_000) });
    await salvageReport(runId, "last", "large-salvage");
    const run = await waitForRun(runId);
    expect(run.status).toBe("failed");
    expect(run.error.code).toBe("event_timeout");
    const { salvage } = run.error;
    expect(salvage.total).toBe(7);
    expect(salvage.entries[0]).toMatchObject({ receiptKey: "small-receipt", output: { email: "small@faults.test" } });
    expect(salvage.entries.slice(1, 6).map((e: { outputOmitted?: boolean }) => e.outputOmitted)).toEqual([true, true, true, true, true]);
    // The large ones left out leave room for a small one after them.
    expect(salvage.entries[6]).toMatchObject({ receiptKey: "last-receipt", output: { email: "last@faults.test" } });
    expect((await allEvents(runId)).at(-1)).toMatchObject({ type: "run.failed", error: { salvage: { total: 7 } } });
  });
});

describe("a play that throws a message of megabytes", () => {
  it("fails with the message cut: stored whole, its end was refused by SQLite on every retry", async () => {
    const runId = await startRun("test-fetch", { rows: [], headers: { quoted: "x".repeat(2_100_000) }, throwHeaders: "play" });
    const run = await waitForRun(runId);
    expect(run.status).toBe("failed");
    expect(run.error.message).toMatch(/^refused with headers x+… \(2\d{6} characters more\)$/);
  });
});

describe("salvage that reaches a run while it carries out its end", () => {
  it("is written into its receipt by the ended run's alarm", async () => {
    // Held before the end's spend report: the run has decided its end and is not ended yet.
    await setFaults([{ point: "run.report", play: "test-calls", hold: true, times: 1 }]);
    const faults = env.FAULTS!.getByName(FAULT_OBJECT_NAME);
    const runId = await startRun("test-calls", { rows: findRows("Ending", 2), dataset: "ending-salvage" });
    try {
      await faults.held(0);
      expect((await runView(runId)).status).toBe("running");
      await salvageReport(runId, "ending", "ending-salvage");
    } finally {
      await clearFaults();
      await faults.release(0);
    }
    expect((await waitForRun(runId)).status).toBe("completed");
    const events = await until(
      () => allEvents(runId),
      (all) => all.some((e) => e.type === "salvage.restored"),
      "the salvage to be written back",
    );
    expect(events.find((e) => e.type === "salvage.restored")).toMatchObject({ total: 1 });
  });
});

describe("a run that cannot tell its directory of its end", () => {
  it("still cancels the child it waited on, and is listed once the directory can be told", async () => {
    // A rule that matches nothing, set first: the coordinator's directory probe asks once whether any rule is set.
    await setFaults([{ point: "export.part", play: "no-such-play" }]);
    // Its limit leaves time for the child to start and the parent to park, however loaded the machine.
    const parent = await startRun("test-parent", { leaf: { n: 1, waitForSignal: true } }, { timeoutSeconds: 6 });
    const childOf = async () =>
      (await apiJson("/v1/runs?limit=200")).body.runs.filter((r: { parentRunId: string | null }) => r.parentRunId === parent);
    const [child] = await until(childOf, (found) => found.length === 1 && found[0].status === "waiting", "the child to wait");
    await until(
      () => runView(parent),
      (run) => run.status === "waiting",
      "the parent to park",
    );
    // Its limit fails the run; every listing of it fails until the child is seen cancelled.
    await setFaults([{ point: "directory.sync", play: "test-parent", times: 100 }]);
    const failed = await until(
      () => runView(parent),
      (run) => run.status === "failed",
      "the parent to fail at its limit",
    );
    expect(failed.error.code).toBe("deadline_exceeded");
    await until(
      () => runView(child!.runId),
      (run) => run.status === "cancelled",
      "the child to be cancelled",
    );
    await clearFaults();
    await until(
      async () => (await apiJson("/v1/runs?limit=200")).body.runs.find((r: { runId: string }) => r.runId === parent),
      (listed) => listed?.status === "failed",
      "the parent to be listed failed",
    );
  });
});

describe("an org directory that cannot be told of a new run", () => {
  it("still runs it, answered 202, and lists it once its alarm can tell the directory", async () => {
    await setFaults([{ point: "directory.sync", fromCall: 1, times: 1 }]);
    const { status, body } = await apiJson("/v1/runs", {
      method: "POST",
      json: { play: "test-calls", input: { rows: findRows("Listed", 2), dataset: "listed" } },
    });
    expect(status).toBe(202);
    const run = await waitForRun(body.runId);
    expect(run.status).toBe("completed");
    const listed = (await apiJson("/v1/runs?limit=200")).body.runs.find((r: { runId: string }) => r.runId === body.runId);
    expect(listed).toMatchObject({ status: "completed" });
  });

  it("lists a run ended as soon as its own answer says it ended, while its end's telling is still on its way", async () => {
    // Told at submit, as it starts, then as it ends: that last telling is held (a loaded machine's slow call).
    await setFaults([{ point: "directory.sync", play: "test-calls", fromCall: 3, times: 1, hold: true }]);
    const runId = await startRun("test-calls", { rows: findRows("Told", 2), dataset: "told" });
    await injector().held(0);
    expect((await waitForRun(runId)).status).toBe("completed");
    const listed = (await apiJson("/v1/runs?limit=200")).body.runs.find((r: { runId: string }) => r.runId === runId);
    expect(listed).toMatchObject({ status: "completed" });
    expect(await injector().release(0)).toBe(1);
  });
});

describe("an org directory that missed a status", () => {
  it("is told the run is running at the next alarm, with no status change to carry it", async () => {
    await simReset();
    // The new run's listing, the first alarm's own try and its sync as the run starts all fail (that alarm with it).
    await setFaults([
      { point: "directory.sync", fromCall: 1, times: 3 },
      { point: "provider.before", tool: "sim_find_email", hold: true, times: 1 },
    ]);
    const input = { name: "Listed Late", domain: "listed.test" };
    const runId = await startRun("test-play-call", { tool: "sim_find_email", input });
    // The alarm's retry runs the play, whose one call is held: the run stays running, and listed so.
    await injector().held(1);
    const listed = await until(
      async () => (await apiJson("/v1/runs?limit=200")).body.runs.find((r: { runId: string }) => r.runId === runId),
      (run) => run?.status === "running",
      "the running run to be listed",
    );
    expect(listed).toMatchObject({ runId, play: "test-play-call" });
    expect(await injector().release(1)).toBe(1);
    expect((await waitForRun(runId)).status).toBe("completed");
  });
});

describe("auth scope", () => {
  it("re-resolves the credentials once when the provider says they changed, and re-claims under the new scope", async () => {
    await simReset();
    await injector().setCredential("sim", "key-1");
    await setFaults([
      {
        point: "provider.before",
        tool: "test_scoped_find",
        fromCall: 1,
        times: 1,
        error: { code: "auth_scope_changed" },
        rotateCredential: { provider: "sim", value: "key-2" },
      },
    ]);
    const rows = [{ id: "s1", tool: "test_scoped_find", input: { name: "Scoped Person", domain: "scope.test" } }];
    const run = await waitForRun(await startRun("test-calls", { rows, dataset: "scoped" }));
    expect(run.result).toEqual({ total: 1, completed: 1, failed: 0 });
    expect((await notices(run.runId)).filter((code) => code === "auth_rescoped")).toHaveLength(1);
    expect(await simStats()).toMatchObject({ billed: 1, duplicates: 0 });

    // The same credentials reuse the receipt; new credentials are a new receipt (and a new bill).
    await api("/v1/test/faults", { method: "DELETE" });
    await injector().setCredential("sim", "key-2");
    await waitForRun(await startRun("test-calls", { rows, dataset: "scoped" }, { force: true }));
    expect((await simStats()).billed).toBe(1);
    await injector().setCredential("sim", "key-3");
    await waitForRun(await startRun("test-calls", { rows, dataset: "scoped" }, { force: true }));
    expect((await simStats()).billed).toBe(2);
  });
});
