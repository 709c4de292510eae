import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { SheetClient } from "../../clients/shards";
import type { PlannedRow } from "../../contracts/shards";
import { SubrequestMeter } from "../../core/meter";
import { readPage, readPageFrom, rowPagesInOrder } from "./dataset-view";

/** A run's dataset of `count` rows of `chars` characters each, written through the shards as an attempt writes them. */
async function datasetOf(count: number, chars: number, shardCount: number) {
  const sheets = new SheetClient({
    env,
    meter: new SubrequestMeter(),
    location: { org: "dev", play: "test-calls", dataset: `big-${crypto.randomUUID()}`, shardCount },
  });
  const runId = `run_${crypto.randomUUID().replaceAll("-", "")}`;
  const attempt = { attemptId: `${runId}/big/0/0`, runId, attemptSeq: 0 };
  const rows: PlannedRow[] = Array.from({ length: count }, (_, index) => ({ key: `k${index}`, index, input: { id: `k${index}` } }));
  await sheets.claimRows({ attempt, rows, recompute: false, leaseTtlMs: 60_000 });
  const text = "x".repeat(chars);
  // In one call, as an attempt persists its chunk: the client pages it under what one RPC may carry (32 MiB).
  const written = await sheets.persistRows(
    attempt,
    rows.map((row) => ({ key: row.key, status: "completed" as const, data: { id: row.key, text }, error: null })),
  );
  expect(written.written).toHaveLength(count);
  return { sheets, runId };
}

describe("reading a dataset of large rows", () => {
  it("exports, pages by cursor and by offset 36 MB of rows in input order, though one shard's answer may carry 32 MiB", async () => {
    const count = 120;
    const { sheets, runId } = await datasetOf(count, 300_000, 1);
    const keys = Array.from({ length: count }, (_, i) => `k${i}`);

    const exported: string[] = [];
    for await (const page of rowPagesInOrder(sheets, runId, count)) exported.push(...page.map((row) => String(row._key)));
    expect(exported).toEqual(keys);

    const paged: string[] = [];
    for (let from: number | null = 0; from !== null; ) {
      const page = await readPageFrom(sheets, { runId, fromIndex: from, limit: 1000, total: count });
      paged.push(...page.rows.map((row) => String(row._key)));
      from = page.nextIndex;
    }
    expect(paged).toEqual(keys);

    // By offset too, a page holds at most the read buffer's 16 Mi characters (a thousand rows of 130 KB were 130 MB at
    // once): a shorter page, whose next page starts where it ended.
    const byOffset: string[] = [];
    let pages = 0;
    for (let offset = 0; offset < count; pages++) {
      const page = await readPage(sheets, runId, offset, 1000);
      expect(page.rows.map((row) => row._key)).toEqual(keys.slice(offset, page.nextIndex));
      byOffset.push(...page.rows.map((row) => String(row._key)));
      offset = page.nextIndex;
    }
    expect(byOffset).toEqual(keys);
    expect(pages).toBeGreaterThan(2);
  });
});
