/**
 * Chaos, part 3: runs against runs and against their limits. Two runs over
 * overlapping rows never execute a row twice; a run that is cancelled, fails
 * or hits its runtime limit releases its leases so a rerun is not blocked;
 * rows blocked too long fail with the keys and the run to wait for; finalize
 * repairs rows that were lost from the sheets. (Cancel stopping provider
 * calls within one wave is test/control.test.ts.)
 */
import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import { sheetShardName } from "../src/clients/shards";
import { allEvents, chunkCompletions, api, notices, runView, simReset, simStats, startRun, waitForRun } from "./helpers";
import { callRows, clearFaults, expectExactlyOnce, setFaults, setSim, SIM_DEFAULTS, until } from "./chaos-helpers";

afterEach(async () => {
  await clearFaults();
  await setSim(SIM_DEFAULTS);
});

/** Leases long enough that only a release, never an expiry, can free them within a test. */
const LONG_LEASES = { rowLeaseTtlMs: 120_000, receiptLeaseTtlMs: 120_000 };
/** A rerun that fails at once if a single one of its rows is still leased. */
const NEVER_WAIT = { blockedRetries: 0 };

async function blockedSeen(runId: string): Promise<boolean> {
  return (await allEvents(runId)).some((e) => e.type === "map.progress" && e.blocked > 0);
}

describe("two runs of one play over overlapping rows", () => {
  it("execute no row twice: the rows one run holds wait in the other until it finishes them", async () => {
    await simReset();
    await setSim({ latencyMs: 200 });
    const all = callRows("Overlap", 300);
    const first = all.slice(0, 200);
    const second = all.slice(100);
    const [a, b] = await Promise.all([
      startRun("test-calls", { rows: first, dataset: "overlap" }, { testPolicy: { blockedRetries: 50 } }),
      startRun("test-calls", { rows: second, dataset: "overlap" }, { testPolicy: { blockedRetries: 50 } }),
    ]);
    const [runA, runB] = [await waitForRun(a), await waitForRun(b)];
    expect([runA.status, runB.status]).toEqual(["completed", "completed"]);

    // Rows 100–199 were executed by exactly one of the two runs; the other reused them.
    const computed = async (runId: string) => chunkCompletions(await allEvents(runId)).reduce((sum, e) => sum + e.completed - e.reused, 0);
    expect((await computed(a)) + (await computed(b))).toBe(300);
    expect((await blockedSeen(a)) || (await blockedSeen(b))).toBe(true);
    await expectExactlyOnce(a, "overlap", first, 300, [a, b]);
    await expectExactlyOnce(b, "overlap", second, 300, [a, b]);
  });
});

describe("teardown releases leases", () => {
  it("after a cancel mid-run: an immediate rerun is never blocked, and completes the rest", async () => {
    await simReset();
    await setSim({ latencyMs: 100 });
    const rows = callRows("Cancelled", 400);
    const runId = await startRun("test-calls", { rows, dataset: "cancelled" }, { testPolicy: LONG_LEASES });
    await until(
      () => runView(runId),
      (run) => run.progress.maps.cancelled?.completed >= 50,
      "some rows done",
    );
    expect((await api(`/v1/runs/${runId}/cancel`, { method: "POST" })).status).toBe(202);
    const cancelled = await waitForRun(runId);
    expect(cancelled.status).toBe("cancelled");
    expect(cancelled.progress.maps.cancelled.completed).toBeLessThan(400);

    await setSim({ latencyMs: 0 });
    const rerun = await startRun("test-calls", { rows, dataset: "cancelled" }, { testPolicy: NEVER_WAIT });
    const done = await waitForRun(rerun);
    expect(done.status).toBe("completed");
    expect(await blockedSeen(rerun)).toBe(false);
    // Receipts were released too: none had to be taken over from the cancelled run.
    expect((await notices(rerun)).filter((code) => code === "receipt_taken_over")).toEqual([]);
    await expectExactlyOnce(rerun, "cancelled", rows, rows.length, [runId, rerun]);
  });

  it("after a run-fatal error: an immediate rerun is never blocked", async () => {
    await simReset();
    await setSim({ latencyMs: 50 });
    const rows = callRows("Fatal", 200);
    // The second chunk's persist fails: the run stops, with the other chunks' rows and receipts leased.
    await setFaults([{ point: "sheet.persist", fromCall: 2, times: 1 }]);
    const runId = await startRun("test-calls", { rows, dataset: "fatal" }, { testPolicy: LONG_LEASES });
    const failed = await waitForRun(runId);
    expect(failed.status).toBe("failed");
    expect(failed.error.code).toBe("sheet_store_failed");
    await clearFaults();

    const rerun = await startRun("test-calls", { rows, dataset: "fatal" }, { testPolicy: NEVER_WAIT });
    expect((await waitForRun(rerun)).status).toBe("completed");
    expect(await blockedSeen(rerun)).toBe(false);
    await expectExactlyOnce(rerun, "fatal", rows, rows.length, [runId, rerun]);
  });

  it("at the runtime limit: the run fails saying so (not cancelled), and a rerun completes the rest", async () => {
    await simReset();
    await setSim({ latencyMs: 400 });
    const rows = callRows("Limit", 400);
    const runId = await startRun("test-calls", { rows, dataset: "limit" }, { timeoutSeconds: 1, testPolicy: LONG_LEASES });
    const run = await waitForRun(runId);
    expect(run.status).toBe("failed");
    expect(run.error.code).toBe("deadline_exceeded");
    expect(run.error.message).toContain("runtime limit of 1 s");
    expect(run.progress.maps.limit.completed).toBeLessThan(400);
    const last = (await allEvents(runId)).at(-1);
    expect(last).toMatchObject({ type: "run.failed", error: { code: "deadline_exceeded" } });

    await setSim({ latencyMs: 0 });
    const rerun = await startRun("test-calls", { rows, dataset: "limit" }, { testPolicy: NEVER_WAIT });
    expect((await waitForRun(rerun)).status).toBe("completed");
    await expectExactlyOnce(rerun, "limit", rows, rows.length, [runId, rerun]);
  });

  it("validates the runtime limit", async () => {
    for (const timeoutSeconds of [0, 1.5, 86_401, "60"]) {
      const res = await api("/v1/runs", { method: "POST", json: { play: "test-calls", input: { rows: [] }, timeoutSeconds } });
      expect(res.status, JSON.stringify(timeoutSeconds)).toBe(400);
    }
  });
});

describe("rows blocked by another run", () => {
  it("fail the chunk after its retries, naming sample rows and the run to wait for", async () => {
    await simReset();
    await setSim({ latencyMs: 1500 });
    const rows = callRows("Held", 20);
    const holder = await startRun("test-calls", { rows, dataset: "held" });
    await until(simStats, (s) => s.calls > 0, "the holder's calls in flight");
    const blocked = await startRun("test-calls", { rows, dataset: "held" }, { testPolicy: NEVER_WAIT });
    const run = await waitForRun(blocked);
    expect(run.status).toBe("failed");
    expect(run.error.code).toBe("rows_blocked");
    expect(run.error.message).toContain(`stayed leased by run ${holder}`);
    expect(run.error.message).toMatch(/rows Held\d+, Held\d+/);
    expect(run.error.message).toContain("cancel it");
    expect((await waitForRun(holder)).status).toBe("completed");
    await expectExactlyOnce(holder, "held", rows, rows.length, [holder, blocked]);
  });
});

describe("finalize", () => {
  it("runs again the chunks whose rows vanished from the sheets, without billing again", async () => {
    await simReset();
    await setSim({ latencyMs: 30 });
    const rows = callRows("Lost", 500);
    const runId = await startRun("test-calls", { rows, dataset: "vanish" }, { testPolicy: { chunkRows: 20 } });
    await until(
      () => allEvents(runId),
      (events) => chunkCompletions(events).some((e) => e.chunk === 0),
      "chunk 0 done",
    );
    // Chunk 0's rows are lost from storage after the chunk reported them (a write that did not stick).
    const keys = JSON.stringify(rows.slice(0, 20).map((r) => r.id));
    for (let shard = 0; shard < 4; shard++) {
      await runInDurableObject(
        env.SHEET_SHARD.getByName(sheetShardName("dev", "test-calls", "vanish", shard)),
        (_object: unknown, state: DurableObjectState) => {
          state.storage.sql.exec("UPDATE row_versions SET status = 'pending' WHERE key IN (SELECT value FROM json_each(?))", keys);
        },
      );
    }
    expect((await runView(runId)).status).toBe("running");

    const run = await waitForRun(runId);
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ total: 500, completed: 500, failed: 0 });
    expect(await notices(runId)).toEqual(expect.arrayContaining(["map_repaired"]));
    await expectExactlyOnce(runId, "vanish", rows);
  });
});
