/**
 * An attempt an executor holds and is not running (assigned and not started, or held to go on after a wind-down)
 * is ended by its coordinator's stop or wind-down from that call's own invocation (src/actors/MapExecutor.ts). Its
 * end, and the bills its executor's outbox still holds, must reach the run's coordinator even when that report
 * fails: the executor's alarm sends them again, and the coordinator counts each bill once.
 */
import { env } from "cloudflare:workers";
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import type { MapExecutor } from "../src/actors/MapExecutor";
import type { BilledRequest, ChunkAssignment, ChunkSummary } from "../src/contracts/executors";
import { ExecutorStore } from "../src/stores/executor-store";
import { createSql } from "../src/stores/sql";
import { api, runView, startRun, waitForRun } from "./helpers";
import { callRows, clearFaults, faultState, heldBy, setFaults, until } from "./chaos-helpers";

let unique = 0;
const id = () => `ue${Date.now().toString(36)}${unique++}`;
const faultInjector = () => env.FAULTS!.getByName("faults");

afterEach(async () => {
  await clearFaults();
});

/** A run cancelled at once, settled: its spend so far. */
async function cancelledRun(): Promise<{ runId: string; spent: number }> {
  const runId = await startRun(
    "test-calls",
    { rows: callRows(`Unstarted${id()}`, 2) },
    { testPolicy: { minExecutors: 1, maxExecutors: 1 } },
  );
  expect((await api(`/v1/runs/${runId}/cancel`, { method: "POST" })).status).toBe(202);
  expect((await waitForRun(runId)).status).toBe("cancelled");
  await until(
    () => heldBy(`${runId}#0`),
    (held) => held.length === 0,
    "the run's executor to hold nothing",
  );
  return { runId, spent: (await runView(runId)).usage.spend.total as number };
}

/** Three calls of `sim_find_email` (1 credit each) its provider billed and no report has carried yet. */
function bills(): BilledRequest[] {
  const batch = id();
  return [0, 1, 2].map((n) => ({ requestKey: `${batch}-${n}`, toolId: "sim_find_email", provider: "sim", credits: 1 }));
}

/**
 * Has executor `<runId>#<slot>` hold an attempt of the run, not running, with `billed` in its outbox: never started,
 * or (`woundDown`) wound down after it billed them, held to go on in its next invocation.
 */
async function holdAttempt(runId: string, slot: number, billed: BilledRequest[], woundDown: boolean): Promise<string> {
  const attemptId = `${runId}/calls/${slot}/7`;
  const assignment: ChunkAssignment = {
    runId,
    map: "calls",
    chunk: slot,
    attempt: { attemptId, runId, attemptSeq: 7 },
    rows: [{ key: "k0", index: 0, input: { id: "k0" } }],
    slice: null,
    dataset: { org: "dev", play: "test-calls", dataset: "calls", shardCount: 1 },
    alongside: null,
  };
  const done: ChunkSummary = { completed: 0, failed: 0, reused: 0, blocked: [], rejected: [], lost: null, failureSamples: [] };
  await runInDurableObject(env.MAP_EXECUTOR.getByName(`${runId}#${slot}`), (_object: unknown, state: DurableObjectState) => {
    const store = new ExecutorStore({ sql: createSql(state.storage) });
    expect(store.assign(assignment)).toBe(true);
    if (woundDown) {
      store.markRunning(attemptId);
      expect(store.resume(attemptId, { rows: [0], done, grantedMicros: 0, stalled: 0 }, assignment)).toBe(true);
    }
    for (const bill of billed) store.addBill(bill);
  });
  return attemptId;
}

/**
 * Calls the executor `name` as its coordinator does, inside the object (a rejection through a stub leaks an unhandled
 * rejection under the test pool, see sheet-shard.test.ts), and not waiting on the outcome.
 */
async function ask(name: string, call: (executor: MapExecutor) => Promise<void>): Promise<void> {
  await runInDurableObject(env.MAP_EXECUTOR.getByName(name), (executor: MapExecutor) => call(executor).catch(() => {}));
}

/** What executor `name` still has in its outbox. */
function outboxOf(name: string): Promise<number> {
  return runInDurableObject(
    env.MAP_EXECUTOR.getByName(name),
    (_object: unknown, state: DurableObjectState) =>
      new ExecutorStore({ sql: createSql(state.storage) }).outbox(1_000, Number.MAX_SAFE_INTEGER).length,
  );
}

describe("an attempt held and not running, ended by its coordinator while its reports fail", () => {
  it("stopped on a cancel while held to go on after a wind-down: the run's spend counts every call it billed, once", async () => {
    const { runId, spent } = await cancelledRun();
    const name = `${runId}#1`;
    const billed = bills();
    const attemptId = await holdAttempt(runId, 1, billed, true);
    // The stop's report never reaches the coordinator (its three tries); the one sent again is applied and its answer
    // lost, so it is sent once more.
    await setFaults([
      { point: "executor.report", play: "test-calls", times: 3 },
      { point: "executor.reported", play: "test-calls", times: 1 },
    ]);
    // As the coordinator stops it on a cancel.
    await ask(name, (executor) => executor.stop(attemptId, "the run was cancelled"));
    const total = await until(
      async () => (await runView(runId)).usage.spend.total as number,
      (credits) => credits >= spent + billed.length,
      "the run's spend to count the stopped attempt's bills",
      15_000,
    );
    await until(
      () => heldBy(name),
      (held) => held.length === 0,
      "the executor to let the attempt go",
    );
    // Three tries lost before the coordinator; the alarm's first send applied, its answer lost; sent again, heard; and
    // counted once.
    expect((await faultState()).counts).toEqual([5, 2]);
    expect(total).toBe(spent + billed.length);
    expect((await runView(runId)).usage.spend.total).toBe(spent + billed.length);
    expect(await outboxOf(name)).toBe(0);
  });

  it("wound down before it ever started: it hands its rows back all the same, with the bills in its executor's outbox", async () => {
    const { runId, spent } = await cancelledRun();
    const name = `${runId}#2`;
    const billed = bills();
    const attemptId = await holdAttempt(runId, 2, billed, false);
    // The wind-down's end is not heard, three tries over.
    await setFaults([{ point: "executor.end", play: "test-calls", times: 3 }]);
    await ask(name, (executor) => executor.windDown(attemptId, "its coordinator's invocation nears its limits"));
    await until(faultState, (state) => state.counts[0] === 4, "the end sent again", 15_000);
    await until(
      () => heldBy(name),
      (held) => held.length === 0,
      "the executor to let the attempt go",
    );
    expect((await runView(runId)).usage.spend.total).toBe(spent + billed.length);
    expect(await outboxOf(name)).toBe(0);
  });

  it("stopped while its executor dies as it reports: the executor's next alarm sends the end and the bills", async () => {
    const { runId, spent } = await cancelledRun();
    const name = `${runId}#3`;
    const billed = bills();
    const attemptId = await holdAttempt(runId, 3, billed, false);
    // The executor is evicted as the stop's report leaves.
    await setFaults([{ point: "executor.report", play: "test-calls", times: 1, crash: true }]);
    await runInDurableObject(env.MAP_EXECUTOR.getByName(name), (executor: MapExecutor) =>
      executor.stop(attemptId, "the run was cancelled"),
    ).then(
      () => expect.fail("the stop returned: the executor was not evicted"),
      (error: unknown) => expect(String(error)).toContain("crashed the invocation"),
    );
    // A new instance: its alarm, armed before the report went, sends it (the test does not wait the minute).
    const executor = env.MAP_EXECUTOR.getByName(name);
    expect(await runDurableObjectAlarm(executor)).toBe(true);
    expect(await heldBy(name)).toEqual([]);
    expect(await outboxOf(name)).toBe(0);
    expect((await runView(runId)).usage.spend.total).toBe(spent + billed.length);
    // Nothing is left to wake for.
    expect(await runDurableObjectAlarm(executor)).toBe(false);
  });

  it("a stop whose report fails leaves alone the same attempt assigned again by a later invocation meanwhile", async () => {
    const { runId } = await cancelledRun();
    const name = `${runId}#4`;
    const attemptId = await holdAttempt(runId, 4, [], false);
    // The stop's first report waits for the test, which assigns the attempt again meanwhile; then all three tries fail.
    await setFaults([
      { point: "executor.report", play: "test-calls", times: 1, hold: true },
      { point: "executor.end", play: "test-calls", times: 3 },
    ]);
    const executor = env.MAP_EXECUTOR.getByName(name);
    const stopping = runInDurableObject(executor, async (object: MapExecutor, state: DurableObjectState) => {
      await object.stop(attemptId, "the run was cancelled").catch(() => {});
      // Read in the same turn the stop ends in: before any alarm it armed can run the new assignment.
      return new ExecutorStore({ sql: createSql(state.storage) }).held();
    });
    await faultInjector().held(0);
    // A later invocation assigns the same attempt, which winds down and is held to go on.
    await runInDurableObject(executor, (_object: unknown, state: DurableObjectState) => {
      const store = new ExecutorStore({ sql: createSql(state.storage) });
      const [held] = store.held();
      expect(held?.state).toBe("ended");
      const later = { ...held!.assignment, invocation: "later-invocation" };
      expect(store.assign(later)).toBe(true);
      store.markRunning(attemptId);
      const done: ChunkSummary = { completed: 0, failed: 0, reused: 0, blocked: [], rejected: [], lost: null, failureSamples: [] };
      expect(store.resume(attemptId, { rows: [0], done, grantedMicros: 0, stalled: 0 }, later)).toBe(true);
    });
    expect(await faultInjector().release(0)).toBe(1);
    const held = await stopping;
    expect((await faultState()).counts).toEqual([3, 3]);
    // The new assignment stays as it was, to go on: the old end's failure did not take its place.
    expect(held).toHaveLength(1);
    expect(held[0]).toMatchObject({ state: "assigned", assignment: { invocation: "later-invocation" } });
    expect(held[0]!.resume).not.toBeNull();
    expect(held[0]!.unreported).toBeUndefined();
  });
});
