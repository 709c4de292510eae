import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { createSql } from "./sql";
import { ExecutorStore } from "./executor-store";
import type { ChunkAssignment } from "../contracts/executors";

describe("ExecutorStore's outbox", () => {
  it("hands out what one report may carry: by count, and by size past the first entry, so that large salvage waits its turn", async () => {
    const attempt = { attemptId: "run_x/m/0/1", runId: "run_x", attemptSeq: 1 };
    const seen = await runInDurableObject(
      env.MAP_EXECUTOR.getByName(`run_${crypto.randomUUID()}#0`),
      (_o: unknown, state: DurableObjectState) => {
        const store = new ExecutorStore({ sql: createSql(state.storage) });
        // Three salvaged answers of 1.5 million characters each (each under SQLite's bound on one value), then a bill.
        for (let i = 0; i < 3; i++)
          store.addSalvage({
            receiptKey: `r${i}`,
            toolId: "t",
            attempt,
            output: "x".repeat(1_500_000),
            completeAttempts: 1,
            error: "e",
            at: 0,
          });
        store.addBill({ requestKey: "q", toolId: "t", provider: "p", credits: 1 });
        const reports: string[][] = [];
        for (let report = 0; report < 4; report++) {
          const overflows = store.outboxOverflows(500, 3_500_000);
          const entries = store.outbox(500, 3_500_000);
          reports.push([String(overflows), ...entries.map((e) => (e.kind === "bill" ? e.bill.requestKey : e.salvage.receiptKey))]);
          if (entries.length > 0) store.shipped(entries.at(-1)!.seq);
        }
        // One entry past the budget still goes alone; and the count bounds too.
        store.addSalvage({
          receiptKey: "big",
          toolId: "t",
          attempt,
          output: "y".repeat(1_900_000),
          completeAttempts: 1,
          error: "e",
          at: 0,
        });
        const alone = store.outbox(500, 1_000).map((e) => e.seq);
        for (let i = 0; i < 3; i++) store.addBill({ requestKey: `b${i}`, toolId: "t", provider: "p", credits: 1 });
        const counted = store.outbox(2, 10_000_000).length;
        return { reports, alone: alone.length, counted };
      },
    );
    expect(seen.reports).toEqual([["true", "r0", "r1"], ["false", "r2", "q"], ["false"], ["false"]]);
    expect(seen).toMatchObject({ alone: 1, counted: 2 });
  });
});

describe("ExecutorStore's held attempts", () => {
  it("holds a wound-down attempt assigned again with what it left, whole past one value's budget, and reads bodies stored before", async () => {
    const runId = `run_${crypto.randomUUID().replaceAll("-", "")}`;
    const assignment: ChunkAssignment = {
      runId,
      map: "m",
      chunk: 0,
      attempt: { attemptId: `${runId}/m/0/1`, runId, attemptSeq: 1 },
      // 600 rows of 1 KiB: the body is kept in parts.
      rows: Array.from({ length: 600 }, (_, index) => ({ key: `k${index}`, index, input: { id: `k${index}`, note: "n".repeat(1024) } })),
      slice: null,
      dataset: { org: "dev", play: "test-calls", dataset: "m", shardCount: 1 },
      alongside: null,
    };
    const done = {
      completed: 2,
      failed: 1,
      reused: 0,
      blocked: [],
      rejected: [],
      lost: null,
      failureSamples: [{ key: "k1", error: "no" }],
    };
    const seen = await runInDurableObject(env.MAP_EXECUTOR.getByName(`${runId}#0`), (_o: unknown, state: DurableObjectState) => {
      const store = new ExecutorStore({ sql: createSql(state.storage) });
      store.assign(assignment);
      store.markRunning(assignment.attempt.attemptId);
      const resumed = store.resume(assignment.attempt.attemptId, { rows: [3, 4, 599], done, grantedMicros: 250_000 }, assignment);
      const [held] = store.held();
      // An assignment stored before wind-downs existed: its body is the assignment alone.
      const old = {
        ...assignment,
        chunk: 1,
        rows: assignment.rows.slice(0, 1),
        attempt: { ...assignment.attempt, attemptId: `${runId}/m/1/1` },
      };
      state.storage.sql.exec(
        "INSERT INTO held (attempt_id, body, state, coordinator) VALUES (?, ?, 'assigned', ?)",
        old.attempt.attemptId,
        JSON.stringify(old),
        runId,
      );
      const before = store.held()[1];
      return { resumed, held, before, gone: store.resume("run_x/m/9/1", { rows: [], done, grantedMicros: 0 }, assignment) };
    });
    expect(seen.resumed).toBe(true);
    expect(seen.held).toEqual({ assignment, state: "assigned", resume: { rows: [3, 4, 599], done, grantedMicros: 250_000 } });
    expect(seen.before).toMatchObject({ assignment: { chunk: 1 }, state: "assigned", resume: null });
    expect(seen.gone).toBe(false);
  });
});

describe("ExecutorStore: the same attempt assigned again", () => {
  it("by a later invocation while it still runs: held for after, kept by the earlier run's finish and resume", async () => {
    const runId = `run_${crypto.randomUUID().replaceAll("-", "")}`;
    const first: ChunkAssignment = {
      runId,
      map: "m",
      chunk: 0,
      attempt: { attemptId: `${runId}/m/0/0`, runId, attemptSeq: 0 },
      rows: [{ key: "k0", index: 0, input: { id: "k0" } }],
      slice: null,
      dataset: { org: "dev", play: "test-calls", dataset: "m", shardCount: 1 },
      alongside: null,
      invocation: "first",
    };
    const later = { ...first, invocation: "later" };
    const seen = await runInDurableObject(env.MAP_EXECUTOR.getByName(`${runId}#0`), (_o: unknown, state: DurableObjectState) => {
      const store = new ExecutorStore({ sql: createSql(state.storage) });
      const { attemptId } = first.attempt;
      store.assign(first);
      store.markRunning(attemptId);
      // A retry of the same assignment changes nothing.
      store.assign(first);
      const retried = store.held().map((h) => [h.state, h.assignment.invocation]);
      store.assign(later);
      const assigned = store.held().map((h) => [h.state, h.assignment.invocation]);
      // The earlier run ends: it neither goes on in place of the later assignment nor takes it away.
      const done = { completed: 0, failed: 0, reused: 0, blocked: [], rejected: [], lost: null, failureSamples: [] };
      const resumed = store.resume(attemptId, { rows: [0], done, grantedMicros: 0 }, first);
      store.finish(attemptId);
      return { retried, assigned, resumed, after: store.held().map((h) => [h.state, h.assignment.invocation]) };
    });
    expect(seen).toEqual({
      retried: [["running", "first"]],
      assigned: [["assigned", "later"]],
      resumed: false,
      after: [["assigned", "later"]],
    });
  });
});
