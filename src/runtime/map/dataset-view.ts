/**
 * A run's view of a persistent dataset, as users read it (API.md "Datasets"):
 * pages by offset or by cursor, and every row in input order for exports.
 *
 * Every read is a seek on each shard's membership by input index, so a page
 * costs the same at any depth: one call per shard, and about the rows it returns.
 */
import type { Row } from "../../play/types";
import {
  MAX_READ_CHARS,
  MAX_READ_ROWS,
  MAX_RUN_COLUMN_CHARS,
  MAX_RUN_COLUMNS,
  type RunColumn,
  type SheetRow,
} from "../../contracts/shards";
import { TroupeError } from "../../core/errors";
import type { SheetClient } from "../../clients/shards";
import { type ShardBuffer, takeInOrder } from "./shard-merge";

export const MAX_PAGE_ROWS = 1000;

/**
 * Rows an export keeps buffered at once, over all shards: each shard is read
 * this many rows divided by the shard count at a time (at least
 * MIN_EXPORT_READ_ROWS), so memory stays flat however many rows there are.
 */
export const EXPORT_BUFFER_ROWS = 8000;
const MIN_EXPORT_READ_ROWS = 100;
/**
 * Characters of row data an export or a page keeps buffered at once, over all
 * shards (each reads its share, at least one row): rows of 40 KB by the
 * thousand would be past the isolate's 128 MB, and past what one shard's
 * answer may carry.
 */
export const READ_BUFFER_CHARS = 16 * 1024 * 1024;

/** The public shape of a row: its data plus `_key`, `_status`, `_error`. */
export function viewRow(row: SheetRow): Row {
  return { ...row.data, _key: row.key, _status: row.status, _error: row.error };
}

/**
 * A play's page of the run's rows (`handle.rows`): every row at input indexes
 * [offset, offset + limit), in input order, however large (the play chose
 * the window, and reads it whole).
 */
export async function readWindow(sheets: SheetClient, runId: string, offset: number, limit: number): Promise<Row[]> {
  const rows = await sheets.readRunRows(runId, offset, offset + Math.min(limit, MAX_PAGE_ROWS));
  return rows.map(viewRow);
}

/**
 * One page of the run's rows by offset, as the API answers it: those at input indexes [offset,
 * nextIndex), in input order, where `nextIndex` is offset + limit unless the
 * rows past READ_BUFFER_CHARS of data come before it (one call per shard,
 * each reading its share of the buffer: a page of large rows is shorter).
 */
export async function readPage(
  sheets: SheetClient,
  runId: string,
  offset: number,
  limit: number,
): Promise<{ rows: Row[]; nextIndex: number }> {
  const shardCount = sheets.location.shardCount;
  // An offset far past the end (any safe integer is one) reads nothing, not past the indexes a shard takes.
  let nextIndex = Math.min(Number.MAX_SAFE_INTEGER, offset + Math.min(limit, MAX_PAGE_ROWS));
  const reads = await Promise.all(
    shardIndexes(shardCount).map((shard) =>
      sheets.readShardRunRows(shard, {
        runId,
        fromIndex: offset,
        toIndex: nextIndex,
        maxChars: Math.min(MAX_READ_CHARS, Math.ceil(READ_BUFFER_CHARS / shardCount)),
      }),
    ),
  );
  // A shard whose budget cut its answer short has rows past its last one: the page ends there.
  for (const read of reads) if (read.cut) nextIndex = Math.min(nextIndex, read.rows.at(-1)!.index + 1);
  const rows = reads
    .flatMap((read) => read.rows)
    .filter((row) => row.index < nextIndex)
    .sort((a, b) => a.index - b.index);
  return { rows: rows.map(viewRow), nextIndex };
}

/** A page read by keyset: its rows, and the input index the next page starts at (null after the last row). */
export interface KeysetPage {
  rows: Row[];
  nextIndex: number | null;
}

/**
 * The run's first `limit` rows from input index `fromIndex` on (below
 * `total`), in input order: one call per shard for a little more than its
 * share, then merged. A page holds fewer than `limit` rows only when the rows
 * are unevenly spread over the shards, or when the next index is past the end
 * of what the run has stored; `nextIndex` is null only when no row is left.
 * A page of a run still running skips the rows it has not reached yet.
 */
export async function readPageFrom(
  sheets: SheetClient,
  page: { runId: string; fromIndex: number; limit: number; total: number },
): Promise<KeysetPage> {
  const limit = Math.min(page.limit, MAX_PAGE_ROWS);
  const shardCount = sheets.location.shardCount;
  // A quarter more than an even share, plus a few: a page comes out short only when a shard holds far more than its share.
  const perShard = Math.min(limit, MAX_READ_ROWS - 1, Math.ceil((limit * 5) / (4 * shardCount)) + 4);
  const buffers = await Promise.all(
    shardIndexes(shardCount).map((shard) =>
      readAhead(sheets, shard, { runId: page.runId, fromIndex: page.fromIndex, total: page.total, rows: perShard, shardCount }),
    ),
  );
  const merged = takeInOrder(buffers);
  const rows = merged.slice(0, limit);
  const left = merged.length > limit || buffers.some((b) => b.more || b.rows.length > 0);
  return { rows: rows.map(viewRow), nextIndex: left && rows.length > 0 ? rows.at(-1)!.index + 1 : null };
}

/**
 * Every row of the run from input index `fromIndex` on, in input order, a
 * page at a time: each shard is read by keyset (its rows after the last one
 * read), and the shards' answers are merged. At most EXPORT_BUFFER_ROWS rows
 * (or MIN_EXPORT_READ_ROWS per shard), and READ_BUFFER_CHARS of their data,
 * are held at once, whatever the dataset's size; a dataset of n rows costs
 * about n / (EXPORT_BUFFER_ROWS / shard count) calls.
 *
 * With `maxRounds`, it stops after that many rounds of reads (each at most a
 * call per shard, EXPORT_BUFFER_ROWS rows and READ_BUFFER_CHARS) and returns
 * the index the rest starts at: one invocation's share of an export
 * (`DatasetExporter`). It returns null once every row is out.
 */
export async function* rowPagesInOrder(
  sheets: SheetClient,
  runId: string,
  total: number,
  options: { fromIndex?: number; maxRounds?: number } = {},
): AsyncGenerator<Row[], number | null> {
  const shardCount = sheets.location.shardCount;
  const perShard = Math.min(MAX_READ_ROWS - 1, Math.max(MIN_EXPORT_READ_ROWS, Math.floor(EXPORT_BUFFER_ROWS / shardCount)));
  const fromIndex = options.fromIndex ?? 0;
  const shards = shardIndexes(shardCount).map((shard) => ({ shard, nextIndex: fromIndex, rows: [] as SheetRow[], more: true }));
  for (let round = 1; ; round++) {
    await Promise.all(
      shards
        .filter((s) => s.more && s.rows.length === 0)
        .map(async (s) => {
          const read = await readAhead(sheets, s.shard, { runId, fromIndex: s.nextIndex, total, rows: perShard, shardCount });
          s.rows = read.rows;
          s.more = read.more;
          if (read.rows.length) s.nextIndex = read.rows.at(-1)!.index + 1;
        }),
    );
    const rows = takeInOrder(shards);
    if (!rows.length) return null;
    yield rows.map(viewRow);
    const left = shards.some((s) => s.more || s.rows.length > 0);
    if (!left) return null;
    // The rows still buffered past the frontier are read again by whoever continues from here.
    if (options.maxRounds !== undefined && round >= options.maxRounds) return rows.at(-1)!.index + 1;
  }
}

/**
 * The fields of the run's rows in the order a reader of its rows in input
 * order first meets them: by the first row that has each, and within a row
 * as `Object.keys` lists it (integer-like keys first, in numeric order, then
 * the others as written). Found by each shard over its own rows (a call per
 * 8 MiB of their data), not by reading every row through here. More than
 * MAX_RUN_COLUMNS fields, or MAX_RUN_COLUMN_CHARS of their names, is a 422
 * (`export_too_wide`). A stored `__proto__` field is not read back with its
 * row (`parseRowData` drops it), so it is not one.
 */
export async function rowFields(sheets: SheetClient, runId: string): Promise<string[]> {
  const columns = (await sheets.runColumns(runId)).filter((column) => column.name !== "__proto__");
  const nameChars = columns.reduce((sum, column) => sum + column.name.length, 0);
  if (columns.length > MAX_RUN_COLUMNS || nameChars > MAX_RUN_COLUMN_CHARS)
    throw new TroupeError(
      "export_too_wide",
      `the rows have more than ${MAX_RUN_COLUMNS} fields, or ${MAX_RUN_COLUMN_CHARS} characters of field names, in all: too many columns to export`,
      { httpStatus: 422, details: { maxColumns: MAX_RUN_COLUMNS, maxColumnChars: MAX_RUN_COLUMN_CHARS } },
    );
  return columns.sort(inKeyOrder).map((column) => column.name);
}

/** Orders fields by their first row, then as `Object.keys` orders an object's own keys. */
function inKeyOrder(a: RunColumn, b: RunColumn): number {
  if (a.index !== b.index) return a.index - b.index;
  const ai = arrayIndex(a.name);
  const bi = arrayIndex(b.name);
  if (ai !== null && bi !== null) return ai - bi;
  if (ai !== null || bi !== null) return ai !== null ? -1 : 1;
  return a.position - b.position;
}

/** The key as an array index (which `Object.keys` lists first, ascending), or null. */
function arrayIndex(key: string): number | null {
  if (!/^(?:0|[1-9]\d{0,9})$/.test(key)) return null;
  const index = Number(key);
  return index < 2 ** 32 - 1 ? index : null;
}

/**
 * A shard's next `rows` rows of the run from `fromIndex` (below `total`),
 * and no more than its share of READ_BUFFER_CHARS, reading one more to
 * learn, exactly, whether it holds more after them (so `rows` is below
 * MAX_READ_ROWS); an answer its size cut short has more.
 */
async function readAhead(
  sheets: SheetClient,
  shard: number,
  read: { runId: string; fromIndex: number; total: number; rows: number; shardCount: number },
): Promise<ShardBuffer<SheetRow>> {
  const { rows, cut } = await sheets.readShardRunRows(shard, {
    runId: read.runId,
    fromIndex: read.fromIndex,
    toIndex: read.total,
    limit: read.rows + 1,
    maxChars: Math.min(MAX_READ_CHARS, Math.ceil(READ_BUFFER_CHARS / read.shardCount)),
  });
  const more = cut || rows.length > read.rows;
  if (rows.length > read.rows) rows.length = read.rows;
  return { rows, more };
}

function shardIndexes(shardCount: number): number[] {
  return Array.from({ length: shardCount }, (_, i) => i);
}
