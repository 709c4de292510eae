/**
 * An upload's index: what the file holds (format, columns, rows, bytes) and
 * where every `every`-th row starts, as a byte offset and a line. Small
 * enough to read whole (at most 10,000 positions), so a reader of rows
 * `[from, to)` can ask storage for just the bytes that hold them.
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
  /** The file's SHA-256, hex (absent from indexes stored before it was kept). */
  sha256?: string;
  /** Rows between two positions. */
  every: number;
  /** `positions.at(i)` is where row `i * every` may be read from: just past the row before it. */
  positions: Positions;
}

/** The index's positions: an array of them as a scan builds it, or packed as an index read back holds them. */
export interface Positions {
  readonly length: number;
  at(i: number): FilePosition | undefined;
}

/**
 * Positions read back from storage, packed as `[offset, line]` pairs of
 * doubles: 16 bytes a position instead of an object each, since every
 * executor that reads an upload keeps its index.
 */
class PackedPositions implements Positions {
  readonly #pairs: Float64Array;

  constructor(pairs: readonly (readonly [number, number])[]) {
    this.#pairs = new Float64Array(pairs.length * 2);
    pairs.forEach(([offset, line], i) => {
      this.#pairs[2 * i] = offset;
      this.#pairs[2 * i + 1] = line;
    });
  }

  get length(): number {
    return this.#pairs.length / 2;
  }

  at(i: number): FilePosition | undefined {
    if (!Number.isInteger(i) || i < 0 || i >= this.length) return undefined;
    return { offset: this.#pairs[2 * i]!, line: this.#pairs[2 * i + 1]! };
  }
}

/** The index as stored: positions as `[offset, line]` pairs. Validated when read back. */
const StoredIndex = z.object({
  format: z.enum(["csv", "ndjson"]),
  columns: z.array(z.string()),
  rows: z.number().int().min(0),
  bytes: z.number().int().min(0),
  sha256: z.string().optional(),
  every: z.number().int().min(1),
  positions: z.array(z.tuple([z.number().int().min(0), z.number().int().min(1)])),
});

export function indexToJson(index: UploadIndex): string {
  const positions = Array.from({ length: index.positions.length }, (_, i) => {
    const { offset, line } = index.positions.at(i)!;
    return [offset, line];
  });
  return JSON.stringify({ ...index, positions });
}

export function indexFromJson(text: string): UploadIndex {
  const stored = StoredIndex.parse(JSON.parse(text));
  return { ...stored, positions: new PackedPositions(stored.positions) };
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
    start: index.positions.at(first)!,
    firstRow: first * index.every,
    end: last < index.positions.length ? index.positions.at(last)!.offset : index.bytes,
  };
}
