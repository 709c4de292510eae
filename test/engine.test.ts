import { env } from "cloudflare:workers";
import { abortAllDurableObjects, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { allEvents, api, apiJson, datasetRows, expectedEmail, simReset, simStats, startRun, waitForRun } from "./helpers";

const person = (i: number, extra: Record<string, unknown> = {}) => ({ id: `p${i}`, name: `Person ${i}`, domain: "keys.test", ...extra });

describe("ctx.map keys and row errors", () => {
  it("drops rows whose explicit key repeats, and counts them", async () => {
    const rows = [person(1), person(2), { ...person(1), name: "Someone Else" }, person(3), person(2)];
    const run = await waitForRun(await startRun("test-map", { rows }));
    expect(run.status).toBe("completed");
    expect(run.result).toMatchObject({ total: 3, completed: 3, failed: 0, duplicatesDropped: 2, firstKeys: ["p1", "p2", "p3"] });
    const stored = await datasetRows(run.runId, "items");
    expect(stored.map((r) => r.name)).toEqual(["Person 1", "Person 2", "Person 3"]);
  });

  it("keys rows by a function, or by content hash plus index", async () => {
    const rows = [person(1), person(1), person(2)];
    const byFn = await waitForRun(await startRun("test-map", { rows, keyMode: "function" }));
    expect(byFn.result).toMatchObject({ total: 2, duplicatesDropped: 1, firstKeys: ["keys.test/Person 1", "keys.test/Person 2"] });
    const byHash = await waitForRun(await startRun("test-map", { rows, keyMode: "hash" }));
    expect(byHash.result.total).toBe(3);
    expect(byHash.result.duplicatesDropped).toBe(0);
    expect(new Set(byHash.result.firstKeys).size).toBe(3);
  });

  it("persists a row whose field throws as failed, with its error and the fields computed before", async () => {
    const rows = [person(10), person(11, { throw: true }), person(12)];
    const run = await waitForRun(await startRun("test-map", { rows }));
    expect(run.status).toBe("completed");
    expect(run.result).toMatchObject({ completed: 2, failed: 1 });
    const failed = (await datasetRows(run.runId, "items"))[1];
    expect(failed).toMatchObject({ _key: "p11", _status: "failed", email: expectedEmail("Person 11", "keys.test") });
    expect(failed._error).toContain("boom for Person 11");
    expect(run.error).toBeNull();
  });

  it("fails only the row whose computed value nests too deep for storage, and completes the others", async () => {
    const rows = [person(13), person(14, { deep: 1000 }), person(15, { deep: 10_000 }), person(16)];
    const run = await waitForRun(await startRun("test-map", { rows }));
    expect(run.status).toBe("completed");
    expect(run.result).toMatchObject({ completed: 2, failed: 2 });
    const stored = await datasetRows(run.runId, "items");
    expect(stored.map((r) => r._status)).toEqual(["completed", "failed", "failed", "completed"]);
    for (const row of stored.slice(1, 3)) expect(row._error).toMatch(/^row_too_deep: the computed row nests past 64 levels at shout\.a\.a/);
  });

  it("cuts a row's log line of megabytes to 4,000 characters, as in the coordinator, and the row's chunk completes", async () => {
    // In an executor (this map runs in one) the line rode its report: at 3 MB the coordinator could never apply it.
    const rows = [person(17), person(18, { logChars: 3_000_000 }), person(19)];
    const run = await waitForRun(await startRun("test-map", { rows }));
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toMatchObject({ completed: 3, failed: 0 });
    const lines = (await allEvents(run.runId)).filter((e) => e.type === "log.appended").map((e) => String(e.line));
    const cut = lines.find((line) => line.includes("Person 18: xxx"));
    expect(cut?.length).toBe(4000);
  });

  it("fails only the row whose field throws after another returned a value too deep to store, keeping its input", async () => {
    const rows = [{ id: "d1" }, { id: "d2-bad" }, { id: "d3" }];
    const run = await waitForRun(await startRun("test-deep-then-throw", { rows }));
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    const stored = await datasetRows(run.runId, "deep");
    expect(stored.map((r) => r._status)).toEqual(["failed", "failed", "failed"]);
    expect(stored[1]).toMatchObject({ _key: "d2-bad", id: "d2-bad", _error: "the second field failed" });
    expect(stored[1].nested).toBeUndefined();
    for (const row of [stored[0], stored[2]]) expect(row._error).toMatch(/^row_too_deep/);
  });

  it("hands an executor a chunk whose rows pass SQLite's 2 MB bound on one value, and runs every row", async () => {
    // 50 rows of 60 KB: a 3 MB assignment. The names are too long for the tool: each row fails alone, naming why.
    const rows = Array.from({ length: 50 }, (_, i) => ({ id: `big-${i}`, name: `${"N".repeat(60_000)}${i}`, domain: "big.test" }));
    const run = await waitForRun(await startRun("test-map", { rows }), { timeoutMs: 60_000 });
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toMatchObject({ total: 50, completed: 0, failed: 50 });
    const stored = await datasetRows(run.runId, "items");
    expect(stored.map((r) => r._key)).toEqual(rows.map((r) => r.id));
    for (const row of stored) expect(row._error).toMatch(/^invalid_tool_input/);
  });

  it("fails the run on the first failed row with onRowError: 'fail'", async () => {
    const rows = [person(20), person(21, { throw: true }), person(22)];
    const run = await waitForRun(await startRun("test-map", { rows, onRowError: "fail" }));
    expect(run.status).toBe("failed");
    expect(run.error.code).toBe("row_failed");
    expect(run.error.message).toContain("row p21 failed");
    expect(run.error.failureSamples).toEqual([{ map: "items", key: "p21", error: expect.stringContaining("boom") }]);
    const events = await allEvents(run.runId);
    expect(events.at(-1)).toMatchObject({ type: "run.failed", error: { code: "row_failed" } });
  });

  it("writes ctx.log lines to the ledger", async () => {
    const run = await waitForRun(await startRun("test-map", { rows: [person(30)], log: "hello from the play" }));
    const logs = (await allEvents(run.runId)).filter((e) => e.type === "log.appended");
    expect(logs.map((e) => e.line)).toContain('hello from the play {"rows":1}');
  });
});

describe("a map the play does not await", () => {
  it("fails the run map_not_awaited when the play returns while it runs, its rows kept for a rerun: it completed, the map stopped", async () => {
    await simReset();
    await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 100 } });
    try {
      const rows = Array.from({ length: 30 }, (_, i) => person(100 + i));
      const run = await waitForRun(await startRun("test-unawaited-map", { rows }));
      expect(run.status).toBe("failed");
      expect(run.error).toMatchObject({ code: "map_not_awaited" });
      expect(run.error.message).toContain('"unawaited"');
      const stored = await datasetRows(run.runId, "unawaited");
      for (const row of stored.filter((r) => r._status === "completed")) expect(row.email).toBe(expectedEmail(row.name, row.domain));
      expect((await simStats()).duplicates).toBe(0);
    } finally {
      await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 0 } });
    }
  });
});

describe("ctx.tool at play level", () => {
  it("dedupes identical calls and bills once", async () => {
    await simReset();
    const run = await waitForRun(await startRun("test-tool", { name: "Play Level", domain: "tool.test" }));
    const email = expectedEmail("Play Level", "tool.test");
    expect(run.result).toEqual({ a: { email }, b: { email }, again: { email } });
    expect((await simStats()).byTool.sim_find_email).toEqual({ calls: 1, billed: 1 });
  });
});

describe("a play that catches its run's stop", () => {
  it("ends cancelled when cancelled, though it caught the refused call and returned", async () => {
    await simReset();
    await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 1_000 } });
    try {
      const runId = await startRun("test-tool", { name: "Caught Stop", domain: "stop.test", catchLater: true });
      for (let i = 0; i < 500 && (await simStats()).calls < 1; i++) await new Promise((r) => setTimeout(r, 10));
      expect((await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" })).status).toBe(202);
      // The first call, already sent, is answered and billed; the later one is refused, and the play returns anyway.
      const run = await waitForRun(runId);
      expect(run.status).toBe("cancelled");
      expect(run.result).toBeNull();
    } finally {
      await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 0 } });
    }
  });
});

describe("durability of the coordinator", () => {
  it("replays the play across invocations when an invocation's subrequest budget is spent", async () => {
    const rows = Array.from({ length: 400 }, (_, i) => person(1000 + i));
    const run = await waitForRun(await startRun("test-map", { rows }));
    expect(run.status).toBe("completed");
    expect(run.result).toMatchObject({ total: 400, completed: 400 });
    // Each invocation spends at most the test budget (400), so 400 rows took several.
    expect(run.usage.objectRpcs + run.usage.providerRequests).toBeGreaterThan(400);
    // Every invocation's object RPCs are in the breakdown by kind, which adds up to the total.
    const byKind: Record<string, number> = run.usage.objectRpcsByKind;
    expect(Object.values(byKind).reduce((sum, n) => sum + n, 0)).toBe(run.usage.objectRpcs);
    expect(byKind).toMatchObject({ "sheet.claimRows": expect.any(Number), "sheet.persistRows": expect.any(Number) });
  });

  it("counts every report its executors sent in the run's object RPCs, the last of each invocation's included", async () => {
    const rows = Array.from({ length: 160 }, (_, i) => person(1500 + i));
    const run = await waitForRun(await startRun("test-map", { rows }));
    expect(run.status).toBe("completed");
    // Each reporter numbers its reports from 1, and the coordinator keeps the last it applied: their sum is how many
    // it received (no report was sent twice in this run: none failed).
    const received = await runInDurableObject(env.RUN_COORDINATOR.getByName(run.runId), (_object: unknown, state: DurableObjectState) => {
      const [row] = state.storage.sql.exec<{ reports: number; reporters: number }>(
        "SELECT sum(seq) AS reports, count(*) AS reporters FROM reports_applied",
      );
      return row!;
    });
    expect(received.reporters).toBeGreaterThan(1);
    expect(run.usage.objectRpcsByKind["run.attemptReport"]).toBe(received.reports);
  });

  it("resumes by its alarm after every object is aborted mid-run, under a new attempt epoch", async () => {
    await simReset();
    await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 20 } });
    try {
      const rows = Array.from({ length: 300 }, (_, i) => person(2000 + i));
      const runId = await startRun("test-map", { rows });
      for (;;) {
        const { body } = await apiJson(`/v1/runs/${runId}`);
        if (body.progress.maps.items?.completed > 0) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      await abortAllDurableObjects();
      const run = await waitForRun(runId);
      expect(run.status).toBe("completed");
      expect(run.runAttempt).toBeGreaterThanOrEqual(1);
      const stored = await datasetRows(runId, "items");
      expect(stored).toHaveLength(300);
      for (const [i, row] of stored.entries()) {
        expect(row).toMatchObject({ _key: `p${2000 + i}`, _status: "completed", email: expectedEmail(`Person ${2000 + i}`, "keys.test") });
      }
      const stats = await simStats();
      // Calls cut off by the abort may be repeated (the provider replays them); each key is billed once.
      expect(stats.billed).toBe(300);
    } finally {
      await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 0 } });
    }
  });

  it("reruns rows in hand in sweeps, in executors and in the coordinator: no call, the same rows, few claims", async () => {
    for (const [from, testPolicy] of [
      [4000, { chunkRows: 10 }],
      [5000, { chunkRows: 10, maxExecutors: 0 }],
    ] as const) {
      // 12 chunks of 10 rows, keyed by a function: rows in hand are keyed before any chunk goes out.
      const rows = Array.from({ length: 120 }, (_, i) => person(from + i));
      const first = await waitForRun(await startRun("test-map", { rows, keyMode: "function" }, { testPolicy }));
      expect(first.status).toBe("completed");
      const billed = (await simStats()).billed;

      const again = await waitForRun(await startRun("test-map", { rows, keyMode: "function" }, { testPolicy }));
      expect(again.status).toBe("completed");
      expect(again.result).toMatchObject({ total: 120, completed: 120, failed: 0 });
      expect(again.usage.providerRequests).toBe(0);
      expect((await simStats()).billed).toBe(billed);
      // Each chunk claims once per shard it touches; after the first wholly reused chunks, the rest share one claim per shard.
      const byKind: Record<string, number> = again.usage.objectRpcsByKind;
      expect(byKind["sheet.claimRows"]).toBeLessThan(first.usage.objectRpcsByKind["sheet.claimRows"] / 2);
      if (testPolicy.maxExecutors === 0) expect(byKind["executor.sweep"]).toBeUndefined();
      else expect(byKind["executor.sweep"]).toBeGreaterThanOrEqual(1);
      const stored = await datasetRows(again.runId, "items");
      expect(stored.map((row) => row._key)).toEqual(rows.map((row) => `keys.test/${row.name}`));
      for (const [i, row] of stored.entries()) {
        const email = expectedEmail(`Person ${from + i}`, "keys.test");
        expect(row).toMatchObject({ _status: "completed", email, shout: email.toUpperCase() });
      }
    }
  });

  it("cancels a run: it ends cancelled, and a rerun completes every row", async () => {
    await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 30 } });
    try {
      const rows = Array.from({ length: 100 }, (_, i) => person(3000 + i));
      const runId = await startRun("test-map", { rows });
      const cancel = await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" });
      expect(cancel.status).toBe(202);
      const run = await waitForRun(runId);
      expect(run.status).toBe("cancelled");
      expect((await allEvents(runId)).at(-1)!.type).toBe("run.cancelled");
      const rerun = await waitForRun(await startRun("test-map", { rows }));
      expect(rerun.status).toBe("completed");
      expect(rerun.result).toMatchObject({ total: 100, completed: 100 });
    } finally {
      await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 0 } });
    }
  });
});

describe("a play's result", () => {
  it("is stored up to 1 MiB of JSON (UTF-8); a larger one, or one JSON cannot hold, fails the run saying so (it was never stored: the run ran on)", async () => {
    const small = await waitForRun(await startRun("test-result", { chars: 1000 }));
    expect(small.status).toBe("completed");
    expect(small.result.padding).toHaveLength(1000);

    const large = await waitForRun(await startRun("test-result", { chars: 2_500_000 }));
    expect(large.status).toBe("failed");
    expect(large.error).toMatchObject({ code: "result_too_large" });
    expect(large.error.message).toContain("the limit is 1048576");
    // Counted in bytes: 700,000 characters of three bytes each are 2.1 MB, past what the run's row stores.
    const wide = await waitForRun(await startRun("test-result", { chars: 700_000, char: "€" }));
    expect(wide.error).toMatchObject({ code: "result_too_large" });

    const cyclic = await waitForRun(await startRun("test-result", { cyclic: true }));
    expect(cyclic.status).toBe("failed");
    expect(cyclic.error.code).toBe("invalid_result");
  });
});

describe("a play-level answer the play changes in place", () => {
  it("is the answer as given to every executor's replay: rows all see the play's own change once", async () => {
    const rows = Array.from({ length: 600 }, (_, i) => ({ id: `m${i}` }));
    const run = await waitForRun(await startRun("test-mutating", { rows }));
    expect(run.result).toEqual({ completed: 600 });
    const stored = await datasetRows(run.runId, "mutated");
    expect(stored).toHaveLength(600);
    // An executor replaying the play for its second attempt found the answer its first replay had changed.
    expect(new Set(stored.map((row) => row.seen))).toEqual(new Set([1]));
  });
});
