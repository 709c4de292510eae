/** A run's view of a dataset: JSON pages (by offset or cursor), or the whole dataset streamed as CSV or NDJSON. */
import { Hono } from "hono";
import { stringify } from "csv-stringify/sync";
import { z } from "zod";
import { MAX_PAGE_ROWS, readPage, readPageFrom, rowFields, rowPagesInOrder } from "../runtime/map/dataset-view";
import { decodeDatasetCursor, encodeDatasetCursor } from "../runtime/map/dataset-cursor";
import { SubrequestMeter } from "../core/meter";
import { SheetClient } from "../clients/shards";
import type { Row } from "../play/types";
import { NotFoundError } from "../core/errors";
import type { AppEnv } from "./context";
import { validate } from "./errors";
import { coordinatorOf, runNotFound } from "./runs";

const DatasetQuery = z
  .object({
    offset: z.coerce.number().int().min(0).optional(),
    /** A `nextCursor` of an earlier page; checked by `decodeDatasetCursor`. */
    cursor: z.string().optional(),
    limit: z.coerce.number().int().min(1).max(MAX_PAGE_ROWS).default(100),
    format: z.enum(["json", "csv", "ndjson"]).default("json"),
    /** CSV only: `1` neutralises cells a spreadsheet would run as formulas. */
    safe: z.enum(["0", "1"]).default("0"),
  })
  .refine((query) => query.offset === undefined || query.cursor === undefined, {
    path: ["cursor"],
    message: "give offset or cursor, not both",
  });

/** A dataset export as a download named after the dataset. */
function exported(body: BodyInit, name: string, format: "csv" | "ndjson"): Response {
  const type = format === "csv" ? "text/csv" : "application/x-ndjson";
  return new Response(body, {
    headers: { "Content-Type": `${type}; charset=utf-8`, "Content-Disposition": `attachment; filename="${name}.${format}"` },
  });
}

/** Columns every export ends with, after the row's own fields. */
const META_COLUMNS = ["_key", "_status", "_error"];

export const datasetRoutes = new Hono<AppEnv>();

datasetRoutes.get("/runs/:runId/datasets/:name", async (c) => {
  const runId = c.req.param("runId");
  const name = c.req.param("name");
  const query = validate(DatasetQuery, c.req.query(), "the query");
  const coordinator = coordinatorOf(c.env, runId);
  const found = await coordinator.dataset(c.get("org"), name);
  if (!found) {
    const run = await coordinator.getRun(c.get("org"));
    if (!run) throw runNotFound(runId);
    // A dataset the play declares, before its map starts: no rows yet, not "no such dataset".
    if (!run.links?.datasets || !Object.hasOwn(run.links.datasets, name))
      throw new NotFoundError("dataset_not_found", `run ${runId} has no dataset ${JSON.stringify(name)}`);
    if (query.format === "csv") return exported(`${META_COLUMNS.join(",")}\r\n`, name, "csv");
    if (query.format === "ndjson") return exported("", name, "ndjson");
    // No cursor was given out for it: any is refused as one that points past its end.
    if (query.cursor !== undefined) decodeDatasetCursor(query.cursor, { runId, dataset: name }, 0);
    return c.json({ rows: [], total: 0, offset: query.offset ?? 0, limit: query.limit, nextCursor: null });
  }
  const { total } = found;
  const sheets = new SheetClient({ env: c.env, location: found.location, meter: new SubrequestMeter() });
  if (query.format === "csv") {
    // The columns are found before the response starts, so a failed read is an error response, not a cut-off file.
    const columns = await datasetColumns(sheets, runId);
    const body = csvStream(rowPagesInOrder(sheets, runId, total), columns, { escapeFormulas: query.safe === "1" });
    return exported(body, name, "csv");
  }
  if (query.format === "ndjson") {
    const pages = rowPagesInOrder(sheets, runId, total);
    // The first page is read before the response starts, so a failed read is an error response, not a cut-off file.
    const first = await pages.next();
    const encoder = new TextEncoder();
    const body = pagedStream(pages, (rows) => [encoder.encode(rows.map((row) => `${JSON.stringify(row)}\n`).join(""))], {
      first: first.done ? [] : first.value,
    });
    return exported(body, name, "ndjson");
  }
  const scope = { runId, dataset: name };
  const cursorAt = (index: number | null) => (index === null || index >= total ? null : encodeDatasetCursor(scope, index));
  if (query.cursor !== undefined) {
    const fromIndex = decodeDatasetCursor(query.cursor, scope, total);
    const page = await readPageFrom(sheets, { runId, fromIndex, limit: query.limit, total });
    return c.json({ rows: page.rows, total, nextCursor: cursorAt(page.nextIndex) });
  }
  const offset = query.offset ?? 0;
  const page = await readPage(sheets, runId, offset, query.limit);
  return c.json({ rows: page.rows, total, offset, limit: query.limit, nextCursor: cursorAt(page.nextIndex) });
});

/**
 * The export's columns: every field any row has, in the order first seen,
 * then `_key`, `_status`, `_error`. Columns cannot be known up front: input
 * fields come from the rows themselves (a loose schema lets any row carry its
 * own), and a row that failed lacks the fields computed after its failure, so
 * any row may add one; each shard finds those of its own rows
 * (`rowFields`).
 */
async function datasetColumns(sheets: SheetClient, runId: string): Promise<string[]> {
  const fields = await rowFields(sheets, runId);
  return [...fields.filter((field) => !META_COLUMNS.includes(field)), ...META_COLUMNS];
}

/**
 * The most cells (rows × columns) a CSV export builds at once: a page is
 * written a slice of its rows at a time, each slice sent before the next is
 * built. A page of thousands of rows by hundreds of columns, written whole,
 * would be millions of cells, past the isolate's memory.
 */
export const MAX_CSV_SLICE_CELLS = 100_000;

/**
 * The rows a page at a time, after the header line, each page in slices of
 * at most MAX_CSV_SLICE_CELLS cells.
 * Exporting a run that is still running reads rows as they change: a field a
 * row gains after its columns were found has no column.
 */
function csvStream(pages: AsyncGenerator<Row[]>, columns: string[], options: { escapeFormulas: boolean }): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  // csv-stringify's escape_formulas prefixes a single quote to cells starting with = + - @, tab or carriage return (OWASP's CSV injection list, with their full-width forms).
  const toCsv = (lines: (string | number)[][]) => encoder.encode(stringify(lines, { escape_formulas: options.escapeFormulas }));
  const sliceRows = Math.max(1, Math.floor(MAX_CSV_SLICE_CELLS / columns.length));
  return pagedStream(
    pages,
    function* (rows) {
      for (let from = 0; from < rows.length; from += sliceRows)
        yield toCsv(rows.slice(from, from + sliceRows).map((row) => columns.map((column) => cellOf(row, column))));
    },
    { header: toCsv([columns]) },
  );
}

/**
 * A byte stream fed one chunk at a time, as the reader pulls: `encode` turns
 * a page into the chunks that carry it, and the next page is read once the
 * last chunk of this one is taken, so never more than one page is read ahead
 * of what the client has taken, and the reads stop when the client goes
 * away. `header` goes first; `first` is a page already read.
 */
function pagedStream(
  pages: AsyncGenerator<Row[]>,
  encode: (rows: Row[]) => Iterable<Uint8Array>,
  options: { header?: Uint8Array; first?: Row[] },
): ReadableStream<Uint8Array> {
  let chunks: Iterator<Uint8Array> = (options.first?.length ? encode(options.first) : [])[Symbol.iterator]();
  return new ReadableStream({
    start(controller) {
      if (options.header) controller.enqueue(options.header);
    },
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
