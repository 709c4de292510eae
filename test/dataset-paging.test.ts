import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { SheetClient, sheetShardName, type DatasetLocation } from "../src/clients/shards";
import type { PlannedRow } from "../src/contracts/shards";
import { SubrequestMeter } from "../src/core/meter";
import { EXPORT_BUFFER_ROWS, readPageFrom, rowPagesInOrder } from "../src/runtime/map/dataset-view";
import { api, apiJson, expectedEmail, startRun, waitForRun } from "./helpers";

let unique = 0;
/** A prefix no other test uses: datasets persist across runs by row key. */
const tag = (name: string) => `${name}-${Date.now().toString(36)}-${unique++}`;

/** Every row of a run's dataset by cursor: the first page plain, then each `nextCursor` until null. */
async function pageByCursor(runId: string, dataset: string, limit: number): Promise<{ rows: Record<string, unknown>[]; pages: number }> {
  const rows: Record<string, unknown>[] = [];
  let path = `/v1/runs/${runId}/datasets/${dataset}?limit=${limit}`;
  for (let pages = 1; ; pages++) {
    const { status, body } = await apiJson(path);
    expect(status, JSON.stringify(body)).toBe(200);
    expect(body.rows.length).toBeGreaterThan(0);
    expect(body.rows.length).toBeLessThanOrEqual(limit);
    rows.push(...body.rows);
    if (body.nextCursor === null) return { rows, pages };
    expect(body.nextCursor).toMatch(/^[A-Za-z0-9_-]+$/);
    path = `/v1/runs/${runId}/datasets/${dataset}?cursor=${body.nextCursor}&limit=${limit}`;
  }
}

describe("a run's dataset paged by cursor and exported as NDJSON", () => {
  it("a run of 300 rows over 8 shards: every row once, in input order, by cursor and in the NDJSON export", async () => {
    const prefix = tag("cursor");
    const rows = Array.from({ length: 300 }, (_, i) => ({
      id: `${prefix}-${i}`,
      name: `Cursor Person ${i}`,
      domain: "cursor.test",
      ...(i % 61 === 3 ? { throw: true } : {}),
    }));
    // 40 rows per shard: the new dataset gets ceil(300 / 40) = 8 shards instead of the minimum 4.
    const runId = await startRun("test-map", { rows }, { testPolicy: { sheetRowsPerShard: 40 } });
    const run = await waitForRun(runId, { timeoutMs: 120_000 });
    expect(run.status).toBe("completed");
    const recorded = await env.SHEET_SHARD.getByName(sheetShardName("dev", "test-map", "items", 0)).ensureDataset({ shardCount: 1 });
    expect(recorded.shardCount).toBe(8);

    const paged = await pageByCursor(runId, "items", 7);
    // A page holds fewer than `limit` rows only when a shard holds far more than its share of them.
    expect(paged.pages).toBeGreaterThanOrEqual(Math.ceil(300 / 7));
    expect(paged.rows.map((r) => r._key)).toEqual(rows.map((r) => r.id));
    paged.rows.forEach((row, i) => {
      if (rows[i]!.throw) expect(row).toMatchObject({ _status: "failed", _error: `boom for Cursor Person ${i}` });
      else expect(row).toMatchObject({ _status: "completed", _error: null, email: expectedEmail(`Cursor Person ${i}`, "cursor.test") });
    });

    // The offset page and the cursor page that follows it continue each other.
    const first = await apiJson(`/v1/runs/${runId}/datasets/items?offset=0&limit=100`);
    expect(first.body).toMatchObject({ total: 300, offset: 0, limit: 100 });
    const second = await apiJson(`/v1/runs/${runId}/datasets/items?cursor=${first.body.nextCursor}&limit=1000`);
    expect(second.body.total).toBe(300);
    expect(second.body.nextCursor).toBeNull();
    expect([...first.body.rows, ...second.body.rows]).toEqual(paged.rows);

    const res = await api(`/v1/runs/${runId}/datasets/items?format=ndjson`);
    expect(res.status).toBe(200);
    expect(res.headers.get("Content-Type")).toMatch(/^application\/x-ndjson/);
    const text = new TextDecoder().decode(await res.arrayBuffer());
    expect(text.endsWith("\n")).toBe(true);
    expect(
      text
        .trimEnd()
        .split("\n")
        .map((line) => JSON.parse(line)),
    ).toEqual(paged.rows);
  });

  it("refuses a cursor it did not give out for this run and dataset with 400 invalid_cursor, and never a 5xx", async () => {
    const prefix = tag("badcursor");
    const rowsOf = (n: number, who: string) =>
      Array.from({ length: n }, (_, i) => ({ id: `${prefix}-${who}-${i}`, name: `P ${i}`, domain: "bad.test" }));
    const [a, b] = await Promise.all([startRun("test-map", { rows: rowsOf(12, "a") }), startRun("test-map", { rows: rowsOf(3, "b") })]);
    await Promise.all([waitForRun(a), waitForRun(b)]);
    const ofA = (await apiJson(`/v1/runs/${a}/datasets/items?limit=5`)).body.nextCursor as string;
    expect(ofA).toEqual(expect.any(String));
    expect((await apiJson(`/v1/runs/${a}/datasets/items?cursor=${ofA}&limit=5`)).status).toBe(200);

    const forged = btoa(JSON.stringify({ v: 1, s: "0000000000000000", i: 1 })).replace(/=+$/, "");
    for (const [runId, cursor] of [
      [b, ofA], // another run's cursor
      [a, "garbage!"],
      [a, "eyJ2IjoxfQ"], // {"v":1}
      [a, forged],
      [a, "x".repeat(5000)],
    ] as const) {
      const { status, body } = await apiJson(`/v1/runs/${runId}/datasets/items?cursor=${encodeURIComponent(cursor)}`);
      expect(status, cursor).toBe(400);
      expect(body.error).toMatchObject({ code: "invalid_cursor", details: [{ path: "cursor" }] });
    }
    const both = await apiJson(`/v1/runs/${a}/datasets/items?cursor=${ofA}&offset=5`);
    expect(both.status).toBe(400);
    expect(both.body.error.code).toBe("invalid_request");
    // A cursor of run a is no key to it from another org.
    const other = await apiJson(`/v1/runs/${a}/datasets/items?cursor=${ofA}`, { token: "other-token" });
    expect(other.status).toBe(404);
  });
});

/** A run's membership of `count` rows written straight into a dataset's shards (no coordinator), in input order. */
async function storedDataset(count: number): Promise<{ location: DatasetLocation; runId: string }> {
  const location = { org: tag("org"), play: "p", dataset: "d", shardCount: 4 };
  const runId = "run-deep";
  const attempt = { attemptId: `${runId}#0`, runId, attemptSeq: 0 };
  const sheets = new SheetClient({ env, location, meter: new SubrequestMeter() });
  for (let from = 0; from < count; from += 1000) {
    const rows: PlannedRow[] = Array.from({ length: Math.min(1000, count - from) }, (_, k) => ({
      key: `k${from + k}`,
      index: from + k,
      input: { n: from + k },
    }));
    await sheets.claimRows({ attempt, rows, recompute: false, leaseTtlMs: 600_000 });
    const written = await sheets.persistRows(
      attempt,
      rows.map((row) => ({ key: row.key, status: "completed" as const, data: { n: row.index, label: `row ${row.index}` }, error: null })),
    );
    expect(written.rejected).toEqual([]);
  }
  return { location, runId };
}

/**
 * Counts what SQLite reads for the shards' statements from now on: every
 * statement of each shard object (a live instance) adds the rows its cursor read.
 */
async function countRowsRead(location: DatasetLocation): Promise<{ read: () => number }> {
  const cursors: { rowsRead: number }[] = [];
  for (let shard = 0; shard < location.shardCount; shard++) {
    const stub = env.SHEET_SHARD.getByName(sheetShardName(location.org, location.play, location.dataset, shard));
    await runInDurableObject(stub, (_instance, state) => {
      const sql = state.storage.sql;
      const exec = sql.exec.bind(sql);
      sql.exec = ((query: string, ...bindings: unknown[]) => {
        const cursor = exec(query, ...(bindings as SqlStorageValue[]));
        cursors.push(cursor);
        return cursor;
      }) as typeof sql.exec;
    });
  }
  return { read: () => cursors.reduce((sum, c) => sum + c.rowsRead, 0) };
}

describe("a page costs the same at any depth", () => {
  it("a cursor page of 100 rows deep in 20,000 costs one call per shard and reads about the rows it returns, as the first page does", async () => {
    const { location, runId } = await storedDataset(20_000);
    const counter = await countRowsRead(location);
    const costs: { rpc: number; rowsRead: number }[] = [];
    for (const fromIndex of [0, 10_000, 19_900]) {
      const meter = new SubrequestMeter();
      const sheets = new SheetClient({ env, location, meter });
      const before = counter.read();
      const page = await readPageFrom(sheets, { runId, fromIndex, limit: 100, total: 20_000 });
      costs.push({ rpc: meter.rpc, rowsRead: counter.read() - before });
      expect(page.rows.map((r) => r.n)).toEqual(Array.from({ length: 100 }, (_, k) => fromIndex + k));
      expect(page.nextIndex).toBe(fromIndex === 19_900 ? null : fromIndex + 100);
    }
    const [first, ...deep] = costs;
    expect(first!.rowsRead).toBeGreaterThan(0);
    for (const cost of deep) {
      expect(cost.rpc).toBe(4);
      // What a scan past the earlier rows would read is thousands of rows; a seek reads about the page.
      expect(cost.rowsRead).toBeLessThanOrEqual(first!.rowsRead * 1.25);
      expect(cost.rowsRead).toBeLessThan(1_000);
    }
    expect(first!.rpc).toBe(4);
  });

  it("an export reads every row once, in order, holding at most EXPORT_BUFFER_ROWS, in calls proportional to its rows", async () => {
    const { location, runId } = await storedDataset(20_000);
    const meter = new SubrequestMeter();
    const sheets = new SheetClient({ env, location, meter });
    const pages = rowPagesInOrder(sheets, runId, 20_000);
    const first = await pages.next();
    // One page pulled: one read per shard so far, not a read of the whole dataset.
    expect(meter.rpc).toBe(4);
    expect(first.done).toBe(false);
    let next = 0;
    const check = (rows: Record<string, unknown>[]) => {
      expect(rows.length).toBeLessThanOrEqual(EXPORT_BUFFER_ROWS);
      for (const row of rows) {
        expect(row).toMatchObject({ n: next, _key: `k${next}`, _status: "completed" });
        next++;
      }
    };
    check(first.value as Record<string, unknown>[]);
    for await (const rows of pages) check(rows);
    expect(next).toBe(20_000);
    // 999 rows per read (EXPORT_BUFFER_ROWS / 4 shards, under the 1,000-row cap), plus each shard's last read.
    expect(meter.rpc).toBeLessThanOrEqual(Math.ceil(20_000 / 999) + 2 * 4);
  });
});

describe("a claim costs the rows it claims", () => {
  it("a redispatch claiming 100 rows of a run with 20,000 settled reads about those rows, not the run's", async () => {
    const { location, runId } = await storedDataset(20_000);
    const counter = await countRowsRead(location);
    const sheets = new SheetClient({ env, location, meter: new SubrequestMeter() });
    // The run's next epoch claims a chunk again: its rows are settled in the run's view and stay so.
    const attempt = { attemptId: `${runId}#1`, runId, attemptSeq: 1 };
    const rows: PlannedRow[] = Array.from({ length: 100 }, (_, k) => ({
      key: `k${10_000 + k}`,
      index: 10_000 + k,
      input: { n: 10_000 + k },
    }));
    const before = counter.read();
    const claims = await sheets.claimRows({ attempt, rows, recompute: false, leaseTtlMs: 600_000 });
    expect([...claims.values()].map((claim) => claim.status)).toEqual(rows.map(() => "completed"));
    // Each shard holds 5,000 of the run's settled rows: a claim that walked them read at least that many.
    expect(counter.read() - before).toBeLessThan(1_000);
  });
});

describe("an offset far past the end", () => {
  it("is an empty last page, not a 400 about the index a shard reads to", async () => {
    const p = `far-${Date.now().toString(36)}`;
    const runId = await startRun("test-map", { rows: [{ id: `${p}-0`, name: "N", domain: "p.test" }] });
    expect((await waitForRun(runId)).status).toBe("completed");
    const page = await apiJson(`/v1/runs/${runId}/datasets/items?offset=${Number.MAX_SAFE_INTEGER - 10}&limit=100`);
    expect(page.status, JSON.stringify(page.body)).toBe(200);
    expect(page.body).toMatchObject({ rows: [], total: 1, nextCursor: null });
  });
});
