/**
 * An upload's index: what the file holds (format, columns, rows, bytes) and
 * where every `every`-th row starts, as a byte offset and a line. Small
 * enough to read whole (10,000 positions for 10,000,000 rows), so a reader of
 * rows `[from, to)` can ask storage for just the bytes that hold them.
 */
import { z } from "zod";
import type { UploadFormat } from "./limits";
import type { FilePosition } from "./scanning";

export interface UploadIndex {
  format: UploadFormat;
  /** The CSV header's columns; for NDJSON, every field name of the file in the order first seen. */
  columns: string[];
  rows: number;
  bytes: number;
  /** Rows between two positions. */
  every: number;
  /** `positions[i]` is where row `i * every` may be read from: just past the row before it. */
  positions: FilePosition[];
}

/** The index as stored: positions as `[offset, line]` pairs. Validated when read back. */
const StoredIndex = z.object({
  format: z.enum(["csv", "ndjson"]),
  columns: z.array(z.string()),
  rows: z.number().int().min(0),
  bytes: z.number().int().min(0),
  every: z.number().int().min(1),
  positions: z.array(z.tuple([z.number().int().min(0), z.number().int().min(1)])),
});

export function indexToJson(index: UploadIndex): string {
  return JSON.stringify({ ...index, positions: index.positions.map((p) => [p.offset, p.line]) });
}

export function indexFromJson(text: string): UploadIndex {
  const stored = StoredIndex.parse(JSON.parse(text));
  return { ...stored, positions: stored.positions.map(([offset, line]) => ({ offset, line })) };
}

/** What to read for rows `[from, to)`: the bytes `[start.offset, end)`, whose first row is row `firstRow`. */
export interface ReadPlan {
  start: FilePosition;
  firstRow: number;
  end: number;
}

/**
 * The smallest indexed span of bytes holding rows `[from, to)`: from the
 * position at or before `from` to the next position at or after `to` (or the
 * end of the file). At most `every - 1` rows before `from` and after `to` are
 * read and dropped. An empty range, or one outside `[0, rows]`, is a RangeError.
 */
export function planRead(index: UploadIndex, from: number, to: number): ReadPlan {
  if (!(Number.isInteger(from) && Number.isInteger(to) && 0 <= from && from < to && to <= index.rows)) {
    throw new RangeError(`rows [${from}, ${to}) are not within the upload's ${index.rows} rows`);
  }
  const first = Math.floor(from / index.every);
  const last = Math.ceil(to / index.every);
  return {
    start: index.positions[first]!,
    firstRow: first * index.every,
    end: last < index.positions.length ? index.positions[last]!.offset : index.bytes,
  };
}
