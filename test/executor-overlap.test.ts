/**
 * An executor runs its next attempt alongside the one that drains (src/actors/MapExecutor.ts):
 * the coordinator assigns it once the older attempt's last rows are all it has left, and every
 * held attempt but that one is replaced.
 */
import { env } from "cloudflare:workers";
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import type { MapExecutor } from "../src/actors/MapExecutor";
import type { ChunkAssignment } from "../src/contracts/executors";
import { MAX_OUTBOUND_IN_FLIGHT } from "../src/core/platform-limits";
import { ExecutorStore } from "../src/stores/executor-store";
import { createSql, MAX_PARAM_CHARS } from "../src/stores/sql";
import { apiJson, datasetRows, notices, simReset, simStats, startRun, waitForRun } from "./helpers";
import { billedCredits, clearFaults, faultState, heldBy, logLines, setFaults, until } from "./chaos-helpers";
import { updateSimConfig } from "../src/sim/client";

let unique = 0;
const id = () => `ov${Date.now().toString(36)}${unique++}`;

const faults = () => env.FAULTS!.getByName("faults");

afterEach(async () => {
  await faults().release(0);
  await clearFaults();
  await updateSimConfig(env, { latencyMs: 0 });
});

/** The run completed in its first epoch, nothing redispatched: each of its `count` rows computed, called and billed once. */
async function expectEachRowOnce(runId: string, count: number): Promise<void> {
  const run = await waitForRun(runId);
  expect(run.status).toBe("completed");
  expect(run.runAttempt).toBe(0);
  expect(await notices(runId)).not.toContain("attempt_redispatched");
  const stored = await datasetRows(runId, "calls");
  expect(stored).toHaveLength(count);
  expect(stored.every((row) => row._status === "completed" && row.out)).toBe(true);
  expect(await simStats()).toMatchObject({ calls: count, billed: count, duplicates: 0 });
}

describe("attempts alongside", () => {
  it("gives an executor its next chunk while its current one drains, on the same six connections, and runs every row once", async () => {
    await simReset();
    await updateSimConfig(env, { latencyMs: 300 });
    // One executor, two chunks of 50 rows, one call each. The first chunk's persist waits for the test: its attempt
    // has drained by then, so the window in which the executor holds it and the next one stays open however slow the
    // machine (left to timing, a late drain report on a loaded machine can arrive after the attempt ended).
    await setFaults([{ point: "sheet.persist", play: "test-calls", hold: true, times: 1 }]);
    const rows = Array.from({ length: 100 }, (_, i) => ({
      id: `${id()}-${i}`,
      tool: "sim_find_email",
      input: { name: `Overlap Person ${i}`, domain: "example.com" },
    }));
    const runId = await startRun("test-calls", { rows }, { testPolicy: { minExecutors: 1, maxExecutors: 1, chunkRows: 50 } });
    const executor = `${runId}#0`;

    await faults().held(0);
    const both = await until(
      () => heldBy(executor),
      (held) => held.length === 2,
      "executor 0 to hold two attempts",
    );
    // The newer one runs alongside the older, which goes on: it was not replaced.
    expect(both[1]!.alongside).toBe(both[0]!.attemptId);
    expect(both[1]!.chunk).toBeGreaterThan(both[0]!.chunk);
    expect(await faults().release(0)).toBe(1);

    const run = await waitForRun(runId);
    expect(run.status).toBe("completed");
    const stored = await datasetRows(runId, "calls");
    expect(stored).toHaveLength(100);
    expect(stored.every((row) => row._status === "completed" && row.out)).toBe(true);
    const stats = await simStats();
    // The two attempts shared the one executor's six connections; each call billed once.
    expect(stats.maxInFlightByCaller).toEqual({ [`MapExecutor:${executor}`]: MAX_OUTBOUND_IN_FLIGHT });
    expect(stats).toMatchObject({ calls: 100, billed: 100, duplicates: 0 });
  });

  it("keeps one held alongside alive while its executor starts nothing more and the older one ends slowly", async () => {
    await simReset();
    await updateSimConfig(env, { latencyMs: 50 });
    // A subrequest budget of 30 has the executor's invocation start nothing more after its first chunk's first calls:
    // the next chunk, assigned alongside as the first drains, is held unstarted until the first ends, which one of
    // its last calls, held by the test at the provider, keeps from doing for longer than the coordinator waits to hear
    // from an attempt (the first attempt lives on: its leases are renewed while the call waits).
    await setFaults([{ point: "provider.before", play: "test-calls", tool: "sim_find_email", fromCall: 45, times: 1, hold: true }]);
    const rows = Array.from({ length: 100 }, (_, i) => ({
      id: `${id()}-${i}`,
      tool: "sim_find_email",
      input: { name: `Heartbeat Person ${i}`, domain: "example.com" },
    }));
    const runId = await startRun(
      "test-calls",
      { rows },
      // (The coordinator's own invocation yields at it too: it has made a dozen subrequests by the next assignment.)
      { testPolicy: { minExecutors: 1, maxExecutors: 1, chunkRows: 50, invocationSubrequestBudget: 30 } },
    );
    const executor = `${runId}#0`;
    await faults().held(0);
    await until(
      () => heldBy(executor),
      (held) => held.length === 2,
      "executor 0 to hold the next chunk alongside",
    );
    // Longer than the coordinator waits to hear from an attempt (5 s under the test policy).
    await new Promise((resolve) => setTimeout(resolve, 6_500));
    expect(await faults().release(0)).toBe(1);

    // The held attempt was not given up on: nothing was redispatched under a new epoch.
    await expectEachRowOnce(runId, 100);
    expect(await notices(runId)).not.toContain("invocation_resumed");
  });

  it("keeps one held alive under the invocation that assigned it again: an earlier one's heartbeat is not sent for it", async () => {
    await simReset();
    await updateSimConfig(env, { latencyMs: 50 });
    // As above, the next chunk is held unstarted alongside the first, whose call the test holds at the provider, and
    // says it is alive. The coordinator's invocation then winds its attempts down: the held one hands its rows back at
    // once, the first once its call is let go. The answer to the first one's end is held too: the executor's
    // invocation goes on while the coordinator's next invocation assigns the same attempt again, held unstarted.
    await setFaults([
      { point: "provider.after", play: "test-calls", tool: "sim_find_email", fromCall: 45, times: 1, hold: true },
      { point: "executor.ended", play: "test-calls", fromCall: 2, times: 1, hold: true },
    ]);
    const rows = Array.from({ length: 100 }, (_, i) => ({
      id: `${id()}-${i}`,
      tool: "sim_find_email",
      input: { name: `Reassigned Person ${i}`, domain: "example.com" },
    }));
    const runId = await startRun(
      "test-calls",
      { rows },
      { testPolicy: { minExecutors: 1, maxExecutors: 1, chunkRows: 50, invocationSubrequestBudget: 30, coordinatorWindDownMs: 5_000 } },
    );
    const executor = `${runId}#0`;
    await faults().held(0);
    const [, next] = await until(
      () => heldBy(executor),
      (held) => held.length === 2,
      "executor 0 to hold the next chunk alongside",
    );
    await until(
      () => heldBy(executor),
      (held) => held.length === 1,
      "the held chunk to be handed back",
    );
    expect(await faults().release(0)).toBe(1);
    await faults().held(1);
    await until(
      () => heldBy(executor),
      (held) => held.some((h) => h.attemptId === next!.attemptId),
      "the next invocation to assign the chunk again",
    );
    // Longer than the executor's heartbeats are apart (a second under the test policy).
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    expect(await heldBy(executor)).toEqual([
      { chunk: next!.chunk, attemptId: next!.attemptId, alongside: null, state: "assigned", resumeRows: null },
    ]);
    expect(await faults().release(1)).toBe(1);

    // The held attempt was not given up on: nothing was redispatched under a new epoch.
    await expectEachRowOnce(runId, 100);
    expect(await notices(runId)).not.toContain("invocation_resumed");
  });

  it("takes the same attempt assigned again while its earlier run's end is still being answered, and runs it after", async () => {
    await simReset();
    // Slow calls: the chunk is far from done when the coordinator's invocation winds it down (after 2 s). The attempt
    // hands the rows it has not started back, and the answer to that end is held: the executor still runs the attempt
    // while the coordinator's next invocation assigns it again.
    await updateSimConfig(env, { latencyMs: 500 });
    await setFaults([{ point: "executor.ended", play: "test-calls", fromCall: 1, times: 1, hold: true }]);
    const rows = Array.from({ length: 50 }, (_, i) => ({
      id: `${id()}-${i}`,
      tool: "sim_find_email",
      input: { name: `Again Person ${i}`, domain: "example.com" },
    }));
    const runId = await startRun(
      "test-calls",
      { rows },
      { testPolicy: { minExecutors: 1, maxExecutors: 1, chunkRows: 50, coordinatorWindDownMs: 2_000 } },
    );
    const executor = `${runId}#0`;
    await faults().held(0);
    const [first] = await heldBy(executor);
    expect(first).toMatchObject({ chunk: 0, state: "running" });
    // The next invocation's assignment is held, to run once the earlier run has ended (not taken for a retry of it).
    await until(
      () => heldBy(executor),
      (held) => held.length === 1 && held[0]!.attemptId === first!.attemptId && held[0]!.state === "assigned",
      "the next invocation to assign the attempt again",
    );
    expect(await faults().release(0)).toBe(1);

    // Not given up and redispatched under a new epoch.
    await expectEachRowOnce(runId, 50);
  });

  it("counts rows waiting in a gathering batch as drained: the next chunk comes while that batch is still to go out", async () => {
    await simReset();
    await updateSimConfig(env, { latencyMs: 100 });
    // demo-enrich: each row finds, then verifies (batchable). A chunk's verifications gather while its finds answer
    // and go out as one batch, which the test holds at the provider: the chunk's rows cannot settle before it
    // returns, so only rows that wait in the batch counting as drained let the next chunk come alongside.
    await setFaults([{ point: "provider.before", tool: "sim_verify_email", play: "demo-enrich", hold: true, times: 1 }]);
    const prefix = id();
    const rows = Array.from({ length: 100 }, (_, i) => ({ id: `${prefix}-${i}`, name: `Gathered Person ${i}`, domain: "example.com" }));
    const runId = await startRun(
      "demo-enrich",
      { rows },
      // Leases long enough that a batch may gather for the whole chunk (a quarter of them).
      { testPolicy: { minExecutors: 1, maxExecutors: 1, chunkRows: 50, rowLeaseTtlMs: 20_000, receiptLeaseTtlMs: 20_000 } },
    );
    const executor = `${runId}#0`;

    await faults().held(0);
    const both = await until(
      () => heldBy(executor),
      (held) => held.length === 2,
      "executor 0 to hold its next chunk while the first one's batch is held",
    );
    expect(both.map((held) => held.chunk)).toEqual([0, 1]);
    expect(await faults().release(0)).toBe(1);

    const run = await waitForRun(runId);
    expect(run.status).toBe("completed");
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ rows: 100, failed: 0 });
    const stats = await simStats();
    expect(stats).toMatchObject({ batchCalls: 2, duplicates: 0 });
    expect(stats.byTool).toMatchObject({ sim_find_email: { calls: 100, billed: 100 }, sim_verify_email: { billed: 100 } });
  });

  it("replaces every held attempt but the one a new assignment runs alongside, and drops an older epoch's", async () => {
    const runId = `run_${id()}`;
    const assignment = (chunk: number, attemptSeq: number, alongside: string | null): ChunkAssignment => ({
      runId,
      map: "m",
      chunk,
      attempt: { attemptId: `${runId}/m/${chunk}/${attemptSeq}`, runId, attemptSeq },
      rows: [],
      slice: null,
      dataset: { org: "dev", play: "test-calls", dataset: "m", shardCount: 1 },
      alongside,
    });
    const held = await runInDurableObject(env.MAP_EXECUTOR.getByName(`${runId}#0`), (_object: unknown, state: DurableObjectState) => {
      const store = new ExecutorStore({ sql: createSql(state.storage) });
      const ids = () => store.held().map((h) => h.assignment.attempt.attemptId);
      const seen: Record<string, unknown> = {};
      store.assign(assignment(0, 1, null));
      store.assign(assignment(1, 1, `${runId}/m/0/1`));
      seen.alongside = ids();
      // A third alongside chunk 1: chunk 0 (not named) is replaced.
      store.assign(assignment(2, 1, `${runId}/m/1/1`));
      seen.third = ids();
      seen.stale = store.assign(assignment(3, 0, null));
      seen.afterStale = ids();
      // A new epoch's, alongside nothing: it replaces them all.
      store.assign(assignment(0, 2, null));
      seen.newEpoch = ids();
      return seen;
    });
    expect(held).toEqual({
      alongside: [`${runId}/m/0/1`, `${runId}/m/1/1`],
      third: [`${runId}/m/1/1`, `${runId}/m/2/1`],
      stale: false,
      afterStale: [`${runId}/m/1/1`, `${runId}/m/2/1`],
      newEpoch: [`${runId}/m/0/2`],
    });
  });

  it("drops a held attempt stopped before it started: it is held no more, so no later alarm starts it", async () => {
    const runId = `run_${id()}`;
    const executor = env.MAP_EXECUTOR.getByName(`${runId}#0`);
    const attemptId = `${runId}/m/0/1`;
    // Held as an executor busy past its alarm's budget holds its next attempt: stored, not started (no alarm runs it yet).
    await runInDurableObject(executor, (_object: unknown, state: DurableObjectState) => {
      new ExecutorStore({ sql: createSql(state.storage) }).assign({
        runId,
        map: "m",
        chunk: 0,
        attempt: { attemptId, runId, attemptSeq: 1 },
        rows: [{ key: "k0", index: 0, input: { id: "k0" } }],
        slice: null,
        dataset: { org: "dev", play: "test-calls", dataset: "m", shardCount: 1 },
        alongside: null,
      });
    });
    expect((await heldBy(`${runId}#0`)).map((h) => h.attemptId)).toEqual([attemptId]);
    // The run is cancelled (or the coordinator gave this executor up): the attempt is stopped before it started.
    await executor.stop(attemptId, "the run was cancelled");
    expect(await heldBy(`${runId}#0`)).toEqual([]);
    // Nothing is left to wake for.
    expect(await runDurableObjectAlarm(executor)).toBe(false);
  });

  it("arms an alarm of its own for an attempt whose end it could not report, once the platform's retries run out", async () => {
    const runId = `run_${id()}`;
    const executor = env.MAP_EXECUTOR.getByName(`${runId}#0`);
    // Its run's coordinator cannot be told anything (its reports fail): this is the platform's last retry of the alarm.
    await setFaults([{ point: "executor.report", play: "test-calls" }]);
    const armed = await runInDurableObject(executor, async (instance: MapExecutor, state: DurableObjectState) => {
      new ExecutorStore({ sql: createSql(state.storage) }).assign({
        runId,
        map: "m",
        chunk: 0,
        attempt: { attemptId: `${runId}/m/0/1`, runId, attemptSeq: 1 },
        rows: [{ key: "k0", index: 0, input: { id: "k0" } }],
        slice: null,
        dataset: { org: "dev", play: "test-calls", dataset: "m", shardCount: 1 },
        alongside: null,
      });
      await expect(instance.alarm({ retryCount: 6, isRetry: true, scheduledTime: Date.now() })).rejects.toThrow(/could not report the end/);
      return state.storage.getAlarm();
    });
    // Else the end, and the bills an end carries, would wait for the next assignment to this executor.
    expect(armed).toBeGreaterThan(Date.now());
    await clearFaults();
    expect(await runDurableObjectAlarm(executor)).toBe(true);
    expect(await heldBy(`${runId}#0`)).toEqual([]);
  });

  it("sends an end it could not report again from the alarm's retry: the chunk is not taken for one cut off, nor redispatched", async () => {
    await simReset();
    // The chunk's end is not heard, three times over: the executor's alarm fails, and the platform retries it.
    await setFaults([{ point: "executor.end", play: "test-calls", times: 3 }]);
    const rows = Array.from({ length: 40 }, (_, i) => ({
      id: `${id()}-${i}`,
      tool: "sim_find_email",
      input: { name: `Unheard Person ${i}`, domain: "example.com" },
    }));
    const runId = await startRun("test-calls", { rows }, { testPolicy: { minExecutors: 1, maxExecutors: 1, chunkRows: 40 } });
    const run = await waitForRun(runId);
    expect(run.status).toBe("completed");
    // Three tries of its end failed, and the alarm's retry's reached the coordinator.
    expect((await faultState()).counts[0]).toBe(4);
    // Not taken for an attempt its executor's restart cut off (its leases given up, its chunk run again).
    expect(await notices(runId)).not.toContain("leases_lost");
    expect((await logLines(runId)).filter((line) => /restarted while it ran|redispatched/.test(line))).toEqual([]);
    const stored = await datasetRows(runId, "calls");
    expect(stored).toHaveLength(40);
    expect(stored.every((row) => row._status === "completed" && row.out)).toBe(true);
    expect(await simStats()).toMatchObject({ calls: 40, billed: 40, duplicates: 0 });
  });

  it("sends an end whose answers were lost again from the alarm's retry, and the coordinator applies it once", async () => {
    await simReset();
    await updateSimConfig(env, { latencyMs: 20 });
    // The coordinator applies the chunk's end; its answer is lost three times over, and the executor's alarm fails.
    await setFaults([{ point: "executor.ended", play: "test-map", times: 3 }]);
    const rows = Array.from({ length: 30 }, (_, i) => ({
      id: `${id()}-${i}`,
      name: `Answerless ${i}`,
      domain: "example.com",
      logChars: 1,
    }));
    const runId = await startRun("test-map", { rows }, { testPolicy: { minExecutors: 1, maxExecutors: 1, chunkRows: 30 } });
    expect((await waitForRun(runId)).status).toBe("completed");
    // The retry sent it a fourth time, and the executor holds nothing more.
    await until(faultState, (state) => state.counts[0] === 4, "the end sent again");
    await until(
      () => heldBy(`${runId}#0`),
      (held) => held.length === 0,
      "the executor to let the attempt go",
    );
    // The end's log lines (and every other's) once each, its bills once.
    const lines = (await logLines(runId)).filter((line) => line.includes("Answerless "));
    expect(lines.sort()).toEqual(rows.map((r) => `[row ${r.id}] ${r.name}: x`).sort());
    const stats = await simStats();
    expect(stats).toMatchObject({ calls: 30, billed: 30, duplicates: 0 });
    expect((await apiJson(`/v1/runs/${runId}`)).body.usage.spend.total).toBe(billedCredits(stats));
  });

  it("sends a coordinator that stalled one report per attempt as it recovers, not one per tick it stalled for", async () => {
    await simReset();
    await updateSimConfig(env, { latencyMs: 20 });
    // The attempt's first report waits (a coordinator stalled); the second rule only counts the reports answered.
    await setFaults([
      { point: "executor.report", play: "test-calls", hold: true, times: 1 },
      { point: "executor.reported", play: "test-calls", fromCall: 1_000_000 },
    ]);
    const rows = Array.from({ length: 30 }, (_, i) => ({
      id: `${id()}-${i}`,
      tool: "sim_find_email",
      input: { name: `Stalled Person ${i}`, domain: "example.com" },
    }));
    const runId = await startRun("test-calls", { rows }, { testPolicy: { minExecutors: 1, maxExecutors: 1, chunkRows: 30 } });
    await faults().held(0);
    // Meanwhile the attempt makes every call and ticks on, a report due every 200 ms (the test policy), for 1.5 s.
    await until(simStats, (stats) => stats.calls === 30, "every call made");
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect((await faultState()).counts[1] ?? 0).toBe(0);
    expect(await faults().release(0)).toBe(1);
    expect((await waitForRun(runId)).status).toBe("completed");
    // The one that waited, the one every tick since joined, and the end.
    expect((await faultState()).counts[1]).toBeLessThanOrEqual(3);
    const stored = await datasetRows(runId, "calls");
    expect(stored).toHaveLength(30);
    expect(stored.every((row) => row._status === "completed" && row.out)).toBe(true);
  });

  it("keeps a held assignment past one value's budget whole, a character split across the parts' boundary included", async () => {
    const runId = `run_${id()}`;
    const held = (pad: number): ChunkAssignment => ({
      runId,
      map: "m",
      chunk: 0,
      attempt: { attemptId: `${runId}/m/0/1`, runId, attemptSeq: 1 },
      rows: [{ key: "k0", index: 0, input: { id: "k0", note: `${"a".repeat(pad)}😀 and more` } }],
      slice: null,
      dataset: { org: "dev", play: "test-calls", dataset: "m", shardCount: 1 },
      alongside: null,
    });
    // The emoji's two UTF-16 units straddle the end of the first part.
    const probe = JSON.stringify(held(1000)).indexOf("😀");
    const assignment = held(1000 + MAX_PARAM_CHARS - 1 - probe);
    expect(JSON.stringify(assignment).indexOf("😀")).toBe(MAX_PARAM_CHARS - 1);
    const back = await runInDurableObject(env.MAP_EXECUTOR.getByName(`${runId}#0`), (_object: unknown, state: DurableObjectState) => {
      const store = new ExecutorStore({ sql: createSql(state.storage) });
      store.assign(assignment);
      return store.held().map((h) => h.assignment);
    });
    expect(back).toEqual([assignment]);
  });
});
