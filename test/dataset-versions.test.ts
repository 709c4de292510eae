/**
 * How datasets are shared across runs: a row is reused only when its key and
 * its input match what was computed, and a run's view of a dataset is fixed
 * when the run ends, whatever later runs (forced or not) compute.
 */
import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { SheetShard } from "../src/actors/SheetShard";
import { migrate } from "../src/stores/sql";
import { SHEET_MIGRATIONS } from "../src/stores/sheet-schema";
import { api, datasetRows, simReset, simStats, startRun, waitForRun } from "./helpers";

const ann = (domain: string) => ({ id: "cust-17", name: "Ann Smith", domain });

async function exportCsv(runId: string): Promise<string> {
  const res = await api(`/v1/runs/${runId}/datasets/leads?format=csv`);
  expect(res.status).toBe(200);
  return res.text();
}

describe("datasets shared across runs", () => {
  it("recompute a row whose input changed, and never change what a finished run returns or exports", async () => {
    await simReset();
    const first = await waitForRun(await startRun("demo-enrich", { rows: [ann("old-typo.com")] }));
    expect(first.status).toBe("completed");
    const [one] = await datasetRows(first.runId, "leads");
    expect(one).toMatchObject({ domain: "old-typo.com", email: "ann.smith@old-typo.com", _status: "completed" });
    const firstCsv = await exportCsv(first.runId);

    // Same key, fixed input: recomputed, not reused.
    const second = await waitForRun(await startRun("demo-enrich", { rows: [ann("fixed.com")] }));
    expect((await datasetRows(second.runId, "leads"))[0]).toMatchObject({
      domain: "fixed.com",
      email: "ann.smith@fixed.com",
      _status: "completed",
    });
    expect(await datasetRows(first.runId, "leads")).toEqual([one]);

    // The same input again: reused, with no new bill.
    const billed = (await simStats()).billed;
    const third = await waitForRun(await startRun("demo-enrich", { rows: [ann("old-typo.com")] }));
    expect((await datasetRows(third.runId, "leads"))[0]).toMatchObject({ domain: "old-typo.com", email: "ann.smith@old-typo.com" });
    expect((await simStats()).billed).toBe(billed);

    // force recomputes (receipts spare the calls) without touching earlier runs' views.
    const secondRows = await datasetRows(second.runId, "leads");
    const forced = await waitForRun(await startRun("demo-enrich", { rows: [ann("fixed.com")] }, { force: true }));
    expect(forced.status).toBe("completed");
    expect((await datasetRows(forced.runId, "leads"))[0]).toMatchObject({ domain: "fixed.com", email: "ann.smith@fixed.com" });
    expect(await datasetRows(first.runId, "leads")).toEqual([one]);
    expect(await datasetRows(second.runId, "leads")).toEqual(secondRows);
    expect(await exportCsv(first.runId)).toBe(firstCsv);
    expect((await simStats()).duplicates).toBe(0);
  });
});

describe("the sheet schema's move to row versions", () => {
  it("keeps every row, lease and membership stored before it", async () => {
    const stub = env.SHEET_SHARD.getByName(`migrate-${crypto.randomUUID()}`);
    const expiresAt = Date.now() + 60_000;
    await runInDurableObject(stub, (_shard: SheetShard, state) => {
      const sql = state.storage.sql;
      // Back to the first schema, with rows as it stored them.
      sql.exec(
        "DROP TABLE row_versions; DROP TABLE row_heads; DROP TABLE run_rows; DROP TABLE run_epochs; DROP TABLE dataset; DELETE FROM _schema",
      );
      migrate(state.storage, SHEET_MIGRATIONS.slice(0, 1));
      sql.exec(`INSERT INTO sheet_rows (key, status, data, error, written_by_run, written_by_attempt, updated_at)
        VALUES ('done', 'completed', '{"name":"done","email":"d@x.io"}', NULL, 'run-old', 'run-old#0', 1)`);
      sql.exec(
        `INSERT INTO sheet_rows (key, status, data, error, lease_attempt_id, lease_run_id, lease_seq, lease_expires_at, updated_at)
        VALUES ('busy', 'pending', '{"name":"busy"}', NULL, 'run-live#0', 'run-live', 0, ?, 1)`,
        expiresAt,
      );
      sql.exec("INSERT INTO run_rows (run_id, idx, key) VALUES ('run-old', 0, 'done'), ('run-live', 0, 'busy')");
      migrate(state.storage, SHEET_MIGRATIONS);
    });
    expect((await stub.readRunRows({ runId: "run-old", fromIndex: 0, toIndex: 10 })).rows).toEqual([
      { index: 0, key: "done", status: "completed", data: { name: "done", email: "d@x.io" }, error: null },
    ]);
    const other = { attemptId: "run-new#0", runId: "run-new", attemptSeq: 0 };
    const claimed = await stub.claimRows({
      attempt: other,
      leaseTtlMs: 60_000,
      recompute: false,
      rows: [{ key: "busy", index: 0, input: { name: "busy" } }],
    });
    expect(claimed.rows).toEqual([
      { key: "busy", status: "blocked", owner: { attemptId: "run-live#0", runId: "run-live", attemptSeq: 0 }, leaseExpiresAt: expiresAt },
    ]);
    // The live attempt still owns its row and may finish it.
    const live = { attemptId: "run-live#0", runId: "run-live", attemptSeq: 0 };
    expect(
      await stub.persistRows({
        attempt: live,
        rows: [{ key: "busy", status: "completed", data: { name: "busy", ok: true }, error: null }],
      }),
    ).toEqual({ written: ["busy"], rejected: [] });
  });
});
