/**
 * Rows `[from, to)` of an upload, read by byte range: the index says which
 * bytes hold them (from an indexed position at or before `from`), storage
 * streams just those, and a scanner started at that position parses them.
 * Neither the file nor the rows outside the range are ever held. This is how
 * a run's executors will read their chunk of an uploaded input.
 */
import { isUnnamedColumn } from "../core/row-fields";
import type { Row } from "../play/types";
import { CsvScanner } from "./csv-scanner";
import { NdjsonScanner } from "./ndjson-scanner";
import type { RowScanner } from "./scanning";
import { planRead, type UploadIndex } from "./upload-index";

/** The bytes of a stored file, `length` of them from `offset`, streamed (R2: a ranged `get`). */
export interface ByteSource {
  read(range: { offset: number; length: number }): Promise<ReadableStream<Uint8Array>>;
}

/** One row of an upload: its number (0-based, header excluded), the line of the file it starts on, its fields. */
export interface UploadRow {
  index: number;
  line: number;
  row: Row;
}

/**
 * Rows `[from, to)` of the upload `index` describes, in file order, exactly
 * as a parse of the whole file would give them: CSV rows as objects keyed by
 * the header's columns (every value a string), NDJSON rows as their objects.
 *
 * @example
 * const rows = await readRows(source, index, { from: 5_000, to: 5_500 });
 * for (const { line, row } of rows) validate(row, `line ${line}`);
 */
export async function readRows(source: ByteSource, index: UploadIndex, range: { from: number; to: number }): Promise<UploadRow[]> {
  const { from, to } = range;
  if (from === to && Number.isInteger(from) && from >= 0 && from <= index.rows) return [];
  const plan = planRead(index, from, to);
  const rows: UploadRow[] = [];
  let next = plan.firstRow;
  const take = (row: Row, line: number) => {
    const i = next++;
    if (i >= from && i < to) rows.push({ index: i, line, row });
  };
  const scanner: RowScanner =
    index.format === "csv"
      ? new CsvScanner({
          start: plan.start,
          onRow: (fields, place) => take(rowOf(index.columns, fields), place.line),
          // The upload's scan took every row of the file: a read in other pieces does not judge them again.
          boundRecordBytes: false,
        })
      : new NdjsonScanner({ start: plan.start, onRow: (row, place) => take(row, place.line), refuseRepeatedKeys: false });
  const reader = (await source.read({ offset: plan.start.offset, length: plan.end - plan.start.offset })).getReader();
  try {
    while (next < to) {
      const { done, value } = await reader.read();
      if (done) {
        await scanner.close();
        break;
      }
      await scanner.write(value);
    }
  } finally {
    // Stops the read early once the range is complete; the rest of the span is not needed.
    await reader.cancel();
  }
  if (rows.length !== to - from) {
    throw new Error(`the upload's index promised rows [${from}, ${to}) but its bytes held ${rows.length} of them`);
  }
  return rows;
}

/**
 * A CSV row as an object: each column an own property (a column named like
 * an Object.prototype member is data like any other; an upload naming a
 * column `__proto__` is refused by its scan, core/row-fields.ts).
 */
export function rowOf(columns: readonly string[], fields: readonly string[]): Row {
  const row: Row = {};
  columns.forEach((column, i) => {
    // A column of no name is no field (core/row-fields.ts).
    if (isUnnamedColumn(column)) return;
    Object.defineProperty(row, column, { value: fields[i], enumerable: true, writable: true, configurable: true });
  });
  return row;
}
