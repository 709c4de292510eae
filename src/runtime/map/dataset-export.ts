/**
 * A dataset export's bytes: rows in input order as CSV or NDJSON, written as
 * the reader pulls (API.md "Datasets"). An export is written in parts, each
 * in an invocation of its own (`DatasetExporter`); this is what one part
 * writes, and what the request that stitches them writes first.
 */
import { stringify } from "csv-stringify/sync";
import { z } from "zod";
import type { Row } from "../../play/types";

/** Columns every export ends with, after the row's own fields. */
export const META_COLUMNS = ["_key", "_status", "_error"];

/**
 * The most cells (rows × columns) a CSV export builds at once: a page is
 * written a slice of its rows at a time, each slice sent before the next is
 * built. A page of thousands of rows by hundreds of columns, written whole,
 * would be millions of cells, past the isolate's memory.
 */
export const MAX_CSV_SLICE_CELLS = 100_000;

/** How an export writes its rows: NDJSON, or CSV under these columns (formula cells neutralised with `escapeFormulas`). */
export const ExportFormat = z.discriminatedUnion("format", [
  z.object({ format: z.literal("ndjson") }),
  z.object({ format: z.literal("csv"), columns: z.array(z.string()).min(1), escapeFormulas: z.boolean() }),
]);
export type ExportFormat = z.infer<typeof ExportFormat>;

/** The CSV header line of an export (its names escaped as cells are). */
export function csvHeader(format: Extract<ExportFormat, { format: "csv" }>): Uint8Array {
  return new TextEncoder().encode(stringify([format.columns], { escape_formulas: format.escapeFormulas }));
}

/**
 * The bytes that carry `pages` in `format`, a page at a time, each CSV page
 * in slices of at most MAX_CSV_SLICE_CELLS cells. `first` is a page already
 * read. A row that gains a field after the export's columns were found (a
 * run still running) has no column for it.
 */
export function exportStream(pages: AsyncGenerator<Row[], unknown>, format: ExportFormat, first: Row[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  if (format.format === "ndjson")
    return pagedStream(
      pages,
      (rows) => (rows.length ? [encoder.encode(rows.map((row) => `${JSON.stringify(row)}\n`).join(""))] : []),
      first,
    );
  const { columns, escapeFormulas } = format;
  // csv-stringify's escape_formulas prefixes a single quote to cells starting with = + - @, tab or carriage return (OWASP's CSV injection list, with their full-width forms).
  const toCsv = (lines: (string | number)[][]) => encoder.encode(stringify(lines, { escape_formulas: escapeFormulas }));
  const sliceRows = Math.max(1, Math.floor(MAX_CSV_SLICE_CELLS / columns.length));
  return pagedStream(
    pages,
    function* (rows) {
      for (let from = 0; from < rows.length; from += sliceRows)
        yield toCsv(rows.slice(from, from + sliceRows).map((row) => columns.map((column) => cellOf(row, column))));
    },
    first,
  );
}

/**
 * A byte stream fed one chunk at a time, as the reader pulls: `encode` turns
 * a page into the chunks that carry it, and the next page is read once the
 * last chunk of this one is taken, so never more than one page is read ahead
 * of what the client has taken, and the reads stop when the client goes
 * away.
 */
function pagedStream(
  pages: AsyncGenerator<Row[], unknown>,
  encode: (rows: Row[]) => Iterable<Uint8Array>,
  first: Row[],
): ReadableStream<Uint8Array> {
  let chunks: Iterator<Uint8Array> = encode(first)[Symbol.iterator]();
  return new ReadableStream({
    async pull(controller) {
      for (;;) {
        const chunk = chunks.next();
        if (!chunk.done) return controller.enqueue(chunk.value);
        const page = await pages.next();
        if (page.done) return controller.close();
        chunks = encode(page.value)[Symbol.iterator]();
      }
    },
    async cancel() {
      await pages.return(undefined);
    },
  });
}

/**
 * A row's cell as CSV text. Own fields only: a row without a field named like
 * an Object.prototype member (`toString`, `constructor`) has an empty cell.
 * Numbers stay numbers, so that formula escaping leaves a negative number alone.
 */
function cellOf(row: Row, column: string): string | number {
  const value = Object.hasOwn(row, column) ? row[column] : undefined;
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return value;
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}
