import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { RunStore } from "./run-store";
import { runMigrations } from "./run-schema";
import { AFTER_MAP_TOTALS, runStoreWithRun, UNDO_MAP_TOTALS } from "./run-schema.fixture";
import { createSql, migrate } from "./sql";

describe("RunStore.progress", () => {
  it("counts each row of a chunk waiting again once: its rows stored before are completed or failed, not waiting too", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`progress-${crypto.randomUUID()}`);
    const progress = await runInDurableObject(stub, (_object, state) => {
      const store = runStoreWithRun(state, "run-progress");
      store.createMap({ name: "leads", shardCount: 1, total: 100, duplicatesDropped: 0, chunkRows: 50 });
      // Chunk 0: 44 rows completed, 1 failed, 5 leased by another run: it goes back to pending, to retry those 5.
      store.startChunk("leads", 0, 0);
      store.finishChunk("leads", 0, {
        done: false,
        completed: 44,
        failed: 1,
        reused: 0,
        blocked: Array.from({ length: 5 }, () => ({ ownerRunId: "run-other", leaseExpiresAt: Date.now() + 60_000 })),
        failureSamples: [],
      });
      return store.progress("leads");
    });
    expect(progress).toMatchObject({ total: 100, completed: 44, failed: 1, active: 0, waiting: 50, blocked: 5 });
    expect(progress.completed + progress.failed + progress.active + progress.waiting + progress.blocked).toBe(100);
  });
});

describe("RunStore input", () => {
  it("reads back an input whose character outside the BMP straddles a stored part's end", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`input-${crypto.randomUUID()}`);
    const label = "😀";
    const padding = (n: number) => ({
      rows: [
        { id: "pad", label: "x".repeat(n) },
        { id: "emoji", label },
      ],
    });
    // Its high half is the last unit of the first 512 Ki-unit part: two lone halves were stored as two U+FFFD.
    const input = padding(512 * 1024 - 1 - JSON.stringify(padding(0)).indexOf(label));
    expect(JSON.stringify(input).charCodeAt(512 * 1024 - 1)).toBe(label.charCodeAt(0));
    const read = await runInDurableObject(stub, (_object, state) => {
      return runStoreWithRun(state, "run-input", "test-padded", input).input();
    });
    expect(read).toEqual(input);
  });
});

describe("RunStore.progress from the sums its chunks keep", () => {
  /** What progress summed over every chunk of the map before the sums were kept. */
  const summed = (state: DurableObjectState, map: string) =>
    state.storage.sql
      .exec(
        `SELECT m.total AS total,
          coalesce(sum(CASE WHEN c.state = 'running' THEN 0 ELSE c.completed END), 0) AS completed,
          coalesce(sum(CASE WHEN c.state = 'running' THEN 0 ELSE c.failed END), 0) AS failed,
          coalesce(sum(CASE WHEN c.state = 'running' THEN c.rows ELSE 0 END), 0) AS active,
          coalesce(sum(CASE WHEN c.state = 'pending' THEN max(0, c.rows - c.completed - c.failed - c.blocked) ELSE 0 END), 0) AS waiting,
          coalesce(sum(CASE WHEN c.state = 'pending' THEN c.blocked ELSE 0 END), 0) AS blocked
        FROM maps m LEFT JOIN chunks c ON c.map = m.name WHERE m.name = ? GROUP BY m.name`,
        map,
      )
      .toArray()[0];

  it("answers what a sum over every chunk answers, through every way a chunk changes", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`totals-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const store = runStoreWithRun(state, "run-totals");
      const maps = ["a", "b"];
      for (const [i, name] of maps.entries())
        store.createMap({ name, shardCount: 1, total: 1000 + i * 55, duplicatesDropped: 0, chunkRows: 100 });
      // A seeded walk: the same sequence on every run of the test.
      let seed = 7;
      const next = (n: number) => {
        seed = (seed * 48271) % 2147483647;
        return seed % n;
      };
      const blocked = (n: number) =>
        Array.from({ length: n }, () => ({ ownerRunId: "run-other", leaseExpiresAt: Date.now() + next(60_000) }));
      for (let step = 0; step < 400; step++) {
        const map = maps[next(2)]!;
        const idx = next(10);
        const rows = store.chunks(map)[idx]!.rows;
        const completed = next(rows + 1);
        const failed = next(rows - completed + 1);
        const done = {
          completed,
          failed,
          reused: next(completed + 1),
          blocked: blocked(next(rows - completed - failed + 1)),
          failureSamples: [],
        };
        switch (next(8)) {
          case 0:
          case 1:
            store.startChunk(map, idx, step);
            break;
          case 2:
            store.finishChunk(map, idx, { ...done, done: next(2) === 0 });
            break;
          case 3:
            store.deferChunk(map, idx, { rows: [], done: { ...done, blocked: done.blocked.map((b) => ({ ...b, key: "k" })) } } as never);
            break;
          case 4:
            store.redispatchRunning();
            break;
          case 5:
            store.reopenChunks(map, [idx, next(10)]);
            break;
          case 6:
            store.setChunkCounts(map, idx, { completed, failed });
            break;
          default:
            store.noteRedispatch(map, idx);
        }
        for (const name of maps) expect(store.progress(name), `step ${step}, map ${name}`).toMatchObject(summed(state, name)!);
      }
    });
  });
});

describe("RunStore.progress of a map of 10,000 chunks", () => {
  it("reads its sums, not every chunk, and a coordinator from before the sums has them summed once", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`totals-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const store = runStoreWithRun(state, "run-big");
      // Back to the schema before the sums, with a map of a million rows part done.
      state.storage.sql.exec(`${UNDO_MAP_TOTALS} UPDATE _schema SET version = ?`, runMigrations.length - 1 - AFTER_MAP_TOTALS);
      store.createMap({ name: "leads", shardCount: 4, total: 1_000_000, duplicatesDropped: 0, chunkRows: 100 });
      for (let idx = 0; idx < 3000; idx++) {
        store.startChunk("leads", idx, 0);
        if (idx < 2990)
          store.finishChunk("leads", idx, { done: true, completed: 99, failed: 1, reused: 0, blocked: [], failureSamples: [] });
      }
      migrate(state.storage, runMigrations);
      const expected = { total: 1_000_000, completed: 2990 * 99, failed: 2990, active: 1000, waiting: 700_000, blocked: 0 };
      expect(store.progress("leads")).toEqual(expected);
      const cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
      const exec = state.storage.sql.exec.bind(state.storage.sql);
      state.storage.sql.exec = ((query: string, ...bindings: SqlStorageValue[]) => {
        const cursor = exec(query, ...bindings);
        cursors.push(cursor);
        return cursor;
      }) as typeof exec;
      expect(store.progress("leads")).toEqual(expected);
      expect(store.runningCounts("leads")).toEqual([]);
      expect(store.runningChunks()).toBe(10);
      // Summing the chunks read 10,000 rows, twice more for the running ones: a tick now reads a few.
      expect(cursors.reduce((sum, cursor) => sum + cursor.rowsRead, 0)).toBeLessThan(100);
    });
  });
});
