/**
 * Chaos, part 1: an executor dies mid-chunk at every phase of a chunk
 * attempt, or is evicted with calls in flight; the coordinator is evicted
 * while its executors run; the coordinator, running chunks in process
 * (`maxExecutors: 0`), has its alarm handler throw or dies in a loop. Each
 * time the run must end completed with every row persisted once and every
 * provider call billed once (the simulator's `duplicates` stays 0: a call
 * billed by a dead attempt is recovered, not sent again).
 */
import { afterEach, describe, expect, it } from "vitest";
import { env } from "cloudflare:workers";
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { FAULT_OBJECT_NAME } from "../src/clients/faults";
import { sheetShardName } from "../src/clients/shards";
import { MAX_OUTBOUND_IN_FLIGHT } from "../src/core/platform-limits";
import { ExecutorStore } from "../src/stores/executor-store";
import { createSql } from "../src/stores/sql";
import { allEvents, chunkCompletions, notices, runView, simReset, simStats, startRun, waitForRun } from "./helpers";
import {
  callRows,
  clearFaults,
  coordinator,
  crash,
  expectExactlyOnce,
  faultState,
  heldBy,
  logLines,
  setFaults,
  setSim,
  SIM_DEFAULTS,
  until,
} from "./chaos-helpers";

afterEach(async () => {
  await clearFaults();
  await setSim(SIM_DEFAULTS);
});

/**
 * Test policy: chunks of 50 rows, 4 executors to start with (src/core/policy.ts). 100 rows are 2 chunks, both in flight
 * at once: the crash kills one executor's attempt while the other's goes on.
 */
const ROWS = 100;

describe("an executor dies mid-chunk", () => {
  const phases = [
    { phase: "after claiming its rows", point: "sheet.claimed", fromCall: 2 },
    { phase: "after claiming receipts", point: "receipt.claimed", fromCall: 3 },
    { phase: "after a provider call, before its receipt completes", point: "provider.after", fromCall: 4 },
    { phase: "after its receipts complete, before it records their bills", point: "receipt.completed", fromCall: 1 },
    { phase: "after persisting rows, before reporting the chunk", point: "sheet.persisted", fromCall: 1 },
  ] as const;

  it.each(phases)(
    "$phase: the next invocation redispatches under a new epoch; each row once, each call billed once",
    async ({ point, fromCall }) => {
      await simReset();
      await setSim({ latencyMs: 5 });
      await setFaults([{ point, fromCall, times: 1, crash: true }]);
      const rows = callRows(`Crash${point.replace(".", "")}`, ROWS);
      const runId = await startRun("test-calls", { rows, dataset: `crash-${point.replace(".", "-")}` });
      const run = await waitForRun(runId);

      expect(run.status).toBe("completed");
      expect(run.result).toEqual({ total: ROWS, completed: ROWS, failed: 0 });
      expect((await faultState()).counts[0]).toBeGreaterThanOrEqual(fromCall);
      expect(run.runAttempt).toBeGreaterThanOrEqual(1);
      const codes = await notices(runId);
      expect(codes).toContain("invocation_resumed");
      if (point === "provider.after") {
        expect(codes).toContain("call_recovered");
        // Asking the provider for a result is a lookup, not a request it counts: usage counts them apart (50 lookups here:
        // counted as requests they would pass the provider's count by far). A request counts as sent when it leaves; the
        // crash may cut off a few of the executor's (at most its six in flight) before the provider has read them.
        expect(run.usage.providerLookups).toBeGreaterThan(0);
        expect(run.usage.providerRequests).toBeLessThanOrEqual((await simStats()).calls + MAX_OUTBOUND_IN_FLIGHT);
      }
      await expectExactlyOnce(runId, `crash-${point.replace(".", "-")}`, rows);
      // Rows the dead attempt persisted were computed by this run: its chunks count them computed, not reused (the
      // computed rows estimates learn from), whichever attempt reported them.
      const chunks = chunkCompletions(await allEvents(runId));
      expect(chunks.map((c) => c.completed - c.reused).reduce((a, b) => a + b, 0)).toBe(ROWS);
    },
  );

  // At 50 ms the executor held two attempts before the first chunk's rows were all answered: a crash then, before its
  // persist was held, released nothing, and the hold caught the redispatched attempt's persist instead.
  for (const latencyMs of [300, 50])
    it(`is evicted holding two attempts, the next alongside the one that drains (${latencyMs} ms calls): both chunks are redispatched, each row once`, async () => {
      await simReset();
      await setSim({ latencyMs });
      // Two chunks: the one whose persist is held and the one assigned alongside it.
      const rows = callRows(`EvictedAlongside${latencyMs}`, 100);
      const dataset = `evicted-alongside-${latencyMs}`;
      // The first chunk's persist waits: its attempt has drained, and the executor holds it and the next one until the crash.
      await setFaults([{ point: "sheet.persist", play: "test-calls", hold: true, times: 1 }]);
      const runId = await startRun("test-calls", { rows, dataset }, { testPolicy: { minExecutors: 1, maxExecutors: 1, chunkRows: 50 } });
      const faults = env.FAULTS!.getByName("faults");
      await faults.held(0);
      await until(
        () => heldBy(`${runId}#0`),
        (held) => held.length === 2,
        "the executor to hold two attempts",
      );
      await crash(env.MAP_EXECUTOR.getByName(`${runId}#0`));
      // The held persist belonged to the aborted instance: letting it go reaches nothing.
      expect(await faults.release(0)).toBe(1);

      const run = await waitForRun(runId);
      expect(run.status).toBe("completed");
      expect(run.runAttempt).toBeGreaterThanOrEqual(1);
      expect(await notices(runId)).toContain("invocation_resumed");
      await expectExactlyOnce(runId, dataset, rows);
    });

  it("is evicted with calls in flight at the provider: its chunk is redispatched and their results recovered", async () => {
    await simReset();
    await setSim({ latencyMs: 200 });
    const rows = callRows("ExecutorEvicted", 100);
    const runId = await startRun("test-calls", { rows, dataset: "executor-evicted" });
    await until(simStats, (s) => s.calls >= 8, "provider calls in flight");
    await crash(env.MAP_EXECUTOR.getByName(`${runId}#0`));

    const run = await waitForRun(runId);
    expect(run.status).toBe("completed");
    expect(run.runAttempt).toBeGreaterThanOrEqual(1);
    const codes = await notices(runId);
    expect(codes).toContain("invocation_resumed");
    // The calls the dead executor had sent were answered anyway: their results are recovered, not bought again.
    expect(codes).toContain("call_recovered");
    await expectExactlyOnce(runId, "executor-evicted", rows);
  });
});

describe("the coordinator dies while its executors run", () => {
  it("is evicted mid-map: the executors finish and report, and the next invocation reuses their rows", async () => {
    await simReset();
    await setSim({ latencyMs: 60 });
    // 4 chunks, one for each of the executors the run starts with: all in flight when the coordinator dies.
    const rows = callRows("Evicted", 200);
    const runId = await startRun("test-calls", { rows, dataset: "evicted" });
    await until(simStats, (s) => s.calls >= 20, "provider calls in flight");
    expect((await runView(runId)).status).toBe("running");
    await crash(coordinator(runId));

    const run = await waitForRun(runId);
    expect(run.status).toBe("completed");
    expect(run.runAttempt).toBeGreaterThanOrEqual(1);
    expect(await notices(runId)).toContain("invocation_resumed");
    await expectExactlyOnce(runId, "evicted", rows);
  });

  it("has an executor start no attempt of the old epoch after it: the trace it was answered before is not reused", async () => {
    await simReset();
    await setSim({ latencyMs: 150 });
    // The run's own rows find by a tool the attempts below do not use, and every call of it past the eighth is held
    // once answered: the run cannot end before the coordinator restarts (on a loaded machine, 200 rows of free calls
    // ended before the steps below reached the restart).
    await setFaults([{ point: "provider.after", tool: "test_scoped_find", fromCall: 9, hold: true }]);
    const ownRows = callRows("HeldAcross", 200).map((row, i) => ({
      id: row.id,
      tool: "test_scoped_find",
      input: { name: `HeldAcross Person ${i}`, domain: "chaos.test" },
    }));
    const runId = await startRun("test-calls", { rows: ownRows, dataset: "held-across" });
    await until(simStats, (s) => s.calls >= 8, "provider calls in flight");
    const { runAttempt } = await runView(runId);
    // Attempts of the run's map whose rows (datasets of their own) no invocation watches: each stops at its first
    // report's answer.
    const attemptOf = (name: string) => {
      const rows = callRows(`HeldAcross${name}`, 50);
      return {
        runId,
        map: "held-across",
        chunk: 0,
        attempt: { attemptId: `${runId}/held-across/0/${runAttempt}-${name}`, runId, attemptSeq: runAttempt },
        rows: rows.map((input, index) => ({ key: input.id, index, input: { ...input } })),
        slice: null,
        dataset: { org: "dev", play: "test-calls", dataset: `held-across-${name}`, shardCount: 1 },
        alongside: null,
      };
    };
    const claimed = (name: string) =>
      env.SHEET_SHARD.getByName(sheetShardName("dev", "test-calls", `held-across-${name}`, 0)).countRunRows({ runId });
    const executor = env.MAP_EXECUTOR.getByName(`${runId}#7`);
    // Executor 7 runs one while the coordinator's invocation of this epoch answers: it asks that invocation's trace.
    expect(await executor.assign(attemptOf("first"))).toBe(true);
    await until(
      () => heldBy(`${runId}#7`),
      (held) => held.length === 0,
      "the first attempt to end",
    );
    expect((await claimed("first")).total).toBeGreaterThan(0);

    // The coordinator restarts: its next invocation fences this epoch off.
    await crash(coordinator(runId));
    await until(
      () => runView(runId),
      (run) => run.runAttempt > runAttempt,
      "the run to resume under a new epoch",
    );
    // The executor now starts an attempt of the old epoch (one it held while it drained another, or a stale
    // coordinator's): the coordinator no longer answers for that epoch, so it runs nothing.
    await runInDurableObject(executor, async (_object: unknown, state: DurableObjectState) => {
      expect(new ExecutorStore({ sql: createSql(state.storage) }).assign(attemptOf("second"))).toBe(true);
      await state.storage.setAlarm(Date.now() + 60_000);
    });
    expect(await runDurableObjectAlarm(executor)).toBe(true);
    expect(await heldBy(`${runId}#7`)).toEqual([]);
    expect((await claimed("second")).total).toBe(0);

    // No call is held from here on, and those held go on: the cancel ends the attempts that made them.
    await clearFaults();
    await env.FAULTS!.getByName(FAULT_OBJECT_NAME).release(0);
    await coordinator(runId).cancel("dev");
    expect((await waitForRun(runId)).status).toBe("cancelled");
  });
});

describe("the coordinator dies while its executors spend under a cap", () => {
  it("hears their attempts' ends at once, and frees what they were granted: the run completes under its cap", async () => {
    await simReset();
    await setSim({ latencyMs: 60 });
    // 150 finds at 1 credit and 150 verifies at 0.25: 187.5 credits.
    const rows = callRows("Granted", 300);
    const runId = await startRun("test-calls", { rows, dataset: "granted" }, { maxSpend: 200 });
    await until(simStats, (s) => s.calls >= 20, "provider calls in flight");
    await crash(coordinator(runId));
    // Their executors' links kept the stub the crash broke: they reported nothing more, and the grants of their
    // attempts (25 credits each) stayed reserved until the run failed spend_cap_reached at 125.
    const run = await waitForRun(runId);
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.usage.spend.total).toBe(187.5);
    await expectExactlyOnce(runId, "granted", rows);
  });
});

describe("the coordinator dies between a chunk's end and its event", () => {
  it("tells that chunk's completion in the next invocation: the ledger has every chunk once", async () => {
    await simReset();
    await setSim({ latencyMs: 40 });
    const rows = callRows("Untold", 120);
    // In the coordinator (12 chunks of 10 rows), with the map's progress held back for a minute: a chunk that ends is
    // stored done, and its chunks.completed waits for the drain's end.
    const testPolicy = { maxExecutors: 0, progressIntervalMs: 60_000, chunkRows: 10 };
    const runId = await startRun("test-calls", { rows, dataset: "untold" }, { testPolicy });
    const doneChunks = () =>
      runInDurableObject(
        coordinator(runId),
        (_object: unknown, state: DurableObjectState) =>
          state.storage.sql.exec<{ n: number }>("SELECT count(*) AS n FROM chunks WHERE state = 'done'").one().n,
      );
    await until(doneChunks, (n) => n > 0, "a chunk to be done");
    expect(chunkCompletions(await allEvents(runId))).toEqual([]);
    await crash(coordinator(runId));

    const run = await waitForRun(runId, { timeoutMs: 60_000 });
    expect(run.status).toBe("completed");
    const told = chunkCompletions(await allEvents(runId)).map((c) => c.chunk);
    expect(told.sort((a, b) => a - b)).toEqual(Array.from({ length: 12 }, (_, i) => i));
    await expectExactlyOnce(runId, "untold", rows);
  });
});

describe("a stale coordinator", () => {
  it("gives a chunk that newer executors own to two more executors: neither runs it, nor stops the current attempt", async () => {
    await simReset();
    await setSim({ latencyMs: 150 });
    const rows = callRows("Stale", 100);
    const runId = await startRun("test-calls", { rows, dataset: "stale-coordinator" });
    await until(simStats, (s) => s.calls >= 8, "provider calls in flight");
    // The coordinator restarts: its next invocation redispatches every chunk in flight under epoch 1.
    await crash(coordinator(runId));
    await until(
      () => runView(runId),
      (run) => run.runAttempt >= 1,
      "the run to resume under a new epoch",
    );

    // The old instance, unaware, hands chunk 0 (epoch 0) to the executor now running its epoch-1 attempt, and to a new one.
    const attempt = { attemptId: `${runId}/stale-coordinator/0/0`, runId, attemptSeq: 0 };
    const stale = {
      runId,
      map: "stale-coordinator",
      chunk: 0,
      attempt,
      rows: rows.slice(0, 50).map((input, index) => ({ key: input.id, index, input: { ...input } })),
      slice: null,
      dataset: { org: "dev", play: "test-calls", dataset: "stale-coordinator", shardCount: 4 },
      alongside: null,
    };
    // Executor 0 takes an attempt of epoch 1 (a redispatched chunk goes to the lowest free slot) ...
    const executor0 = env.MAP_EXECUTOR.getByName(`${runId}#0`);
    await until(
      () =>
        runInDurableObject(executor0, (_object: unknown, state: DurableObjectState) => {
          const [row] = state.storage.sql.exec<{ attempt_seq: number }>("SELECT attempt_seq FROM epoch").toArray();
          return row?.attempt_seq ?? -1;
        }),
      (seq) => seq >= 1,
      "executor 0 to hold an attempt of epoch 1",
    );
    // ... so it drops the stale attempt (its current one goes on). Executor 7 has seen no epoch: it holds it.
    expect(await executor0.assign(stale)).toBe(false);
    expect(await env.MAP_EXECUTOR.getByName(`${runId}#7`).assign(stale)).toBe(true);

    const run = await waitForRun(runId);
    expect(run.status).toBe("completed");
    // The new executor never ran the stale attempt (the run's coordinator no longer answers for epoch 0) ...
    expect(Object.keys((await simStats()).maxInFlightByCaller)).not.toContain(`MapExecutor:${runId}#7`);
    // Each row once, each call billed once: the stale attempt made no call and wrote nothing.
    await expectExactlyOnce(runId, "stale-coordinator", rows);
  });
});

describe("an attempt no invocation waits for", () => {
  it("is told to stop by the coordinator's answer to its first report, instead of calling providers until its lease heartbeat", async () => {
    await simReset();
    await setSim({ latencyMs: 300 });
    const runId = await startRun(
      "test-calls",
      { rows: callRows("Watched", 400), dataset: "orphaned" },
      { testPolicy: { minExecutors: 1, maxExecutors: 1 } },
    );
    await until(
      () => heldBy(`${runId}#0`),
      (held) => held.length > 0,
      "the run's executor to hold an attempt",
    );
    const { runAttempt } = await runView(runId);
    // An attempt of the current epoch that no invocation watches, as one is after its coordinator restarted (and a
    // cancel found no invocation to stop it), gave its executor up, or lost the answer to its assign: it runs, and its
    // rows (here a dataset of their own) call the provider.
    const orphan = callRows("Orphan", 400);
    const dataset = { org: "dev", play: "test-calls", dataset: "orphaned-elsewhere", shardCount: 1 };
    expect(
      await env.MAP_EXECUTOR.getByName(`${runId}#7`).assign({
        runId,
        map: "orphaned",
        chunk: 0,
        attempt: { attemptId: `${runId}/orphaned/0/${runAttempt}-orphan`, runId, attemptSeq: runAttempt },
        rows: orphan.map((input, index) => ({ key: input.id, index, input: { ...input } })),
        slice: null,
        dataset,
        alongside: null,
      }),
    ).toBe(true);
    await until(
      () => heldBy(`${runId}#7`),
      (held) => held.length === 0,
      "the orphaned attempt to end",
    );
    // It ran (it claimed its rows) and stopped at its first report's answer: most of its rows were never computed
    // (run on, it computes all 400).
    const counts = await env.SHEET_SHARD.getByName(sheetShardName("dev", "test-calls", dataset.dataset, 0)).countRunRows({ runId });
    expect(counts.total).toBe(orphan.length);
    expect(counts.completed + counts.failed).toBeLessThan(orphan.length / 2);

    await coordinator(runId).cancel("dev");
    expect((await waitForRun(runId)).status).toBe("cancelled");
  });
});

describe("alarm retries", () => {
  it("retries an alarm handler that throws, and dispatches no chunk twice", async () => {
    await simReset();
    // 120 rows (12 chunks of 10) take several invocations under this budget; the first two alarms throw after driving, before re-arming.
    await setFaults([{ point: "run.alarm", fromCall: 1, times: 2 }]);
    const rows = callRows("Alarm", 120);
    // A coordinator that hands chunks to executors spends few subrequests: a small budget still makes it yield often.
    const runId = await startRun(
      "test-calls",
      { rows, dataset: "alarm-retries" },
      { testPolicy: { invocationSubrequestBudget: 5, chunkRows: 10 } },
    );
    const run = await waitForRun(runId);

    expect(run.status).toBe("completed");
    // Both failures fired, and the run went on after each (the alarm that ends the run may check the plan after the test reads it).
    expect((await faultState()).counts[0]).toBeGreaterThanOrEqual(3);
    const completions = chunkCompletions(await allEvents(runId)).map((e) => e.chunk);
    expect(completions.sort((a, b) => a - b)).toEqual(Array.from({ length: 12 }, (_, i) => i));
    await expectExactlyOnce(runId, "alarm-retries", rows);
  });
});

describe("a play that catches its map's yield", () => {
  it("has not ended: the run goes on in the next invocation and completes the map, every row computed once", async () => {
    await simReset();
    const rows = Array.from({ length: 120 }, (_, i) => ({ id: `sw-${i}`, name: `Swallow Person ${i}`, domain: "swallow.test" }));
    // A small budget makes the map yield after a few chunks; the play catches the yield and returns.
    const runId = await startRun("test-swallow", { rows }, { testPolicy: { invocationSubrequestBudget: 10, chunkRows: 5 } });
    const run = await waitForRun(runId, { timeoutMs: 60_000 });
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toEqual({ completed: 120 });
    const stats = await simStats();
    expect(stats.duplicates).toBe(0);
  });
});

describe("infrastructure failures in a row", () => {
  it("are counted once each: an invocation that failed and retried is not also counted as interrupted, and the run completes", async () => {
    await simReset();
    // Each of the first three invocations fails its one chunk after claiming its rows (a shard call failing), then retries.
    await setFaults([{ point: "sheet.claimed", fromCall: 1, times: 3 }]);
    const rows = callRows("InfraRetry", 40);
    // Counted twice, three failures were six, past the test policy's three interrupted invocations: crash_loop.
    const runId = await startRun("test-calls", { rows, dataset: "infra-retries" }, { testPolicy: { maxExecutors: 0 } });
    const run = await waitForRun(runId);
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    // Each failure retried once, counted 1/6, 2/6, 3/6.
    const retries = (await logLines(runId)).filter((line) => line.startsWith("retrying after an infrastructure error"));
    expect(retries.map((line) => line.match(/\((\d)\/6\)/)?.[1])).toEqual(["1", "2", "3"]);
    await expectExactlyOnce(runId, "infra-retries", rows);
  });
});

describe("a crash loop", () => {
  it("fails the run with crash_loop instead of redispatching forever, and a rerun after the fault clears completes", async () => {
    await simReset();
    await setFaults([{ point: "sheet.claimed", fromCall: 1, crash: true }]);
    const rows = callRows("CrashLoop", 60);
    // The coordinator runs the chunks (no executors), so the crash kills its invocations; an executor's would cost its chunk a redispatch.
    // Two interrupted invocations in a row are a loop here: each waits out the alarm's retry backoff (2 s, 4 s, 8 s...).
    const runId = await startRun(
      "test-calls",
      { rows, dataset: "crash-loop" },
      { testPolicy: { maxExecutors: 0, maxInterruptedInvocations: 1 } },
    );
    const run = await waitForRun(runId);
    expect(run.status).toBe("failed");
    expect(run.error.code).toBe("crash_loop");
    expect(run.error.message).toContain("2 invocations in a row died with chunks in flight");

    await clearFaults();
    const rerun = await waitForRun(await startRun("test-calls", { rows, dataset: "crash-loop" }));
    expect(rerun.status).toBe("completed");
    await expectExactlyOnce(rerun.runId, "crash-loop", rows);
  });
});
