/** A run's view of a dataset: JSON pages, or the whole dataset as streamed CSV. */
import { Hono } from "hono";
import { stringify } from "csv-stringify/sync";
import { z } from "zod";
import { MAX_PAGE_ROWS, readPage } from "../engine/dataset-view";
import { SheetClient, SubrequestMeter } from "../engine/shard-clients";
import { NotFoundError } from "../shared/errors";
import type { AppEnv } from "./app";
import { validate } from "./errors";
import { coordinatorOf, runNotFound } from "./runs";

const DatasetQuery = z.object({
  offset: z.coerce.number().int().min(0).default(0),
  limit: z.coerce.number().int().min(1).max(MAX_PAGE_ROWS).default(100),
  format: z.enum(["json", "csv"]).default("json"),
});

const CSV_PAGE_ROWS = 500;

export const datasetRoutes = new Hono<AppEnv>();

datasetRoutes.get("/runs/:runId/datasets/:name", async (c) => {
  const runId = c.req.param("runId");
  const name = c.req.param("name");
  const query = validate(DatasetQuery, c.req.query(), "the query");
  const coordinator = coordinatorOf(c.env, runId);
  const found = await coordinator.dataset(c.get("org"), name);
  if (!found) {
    if (!(await coordinator.getRun(c.get("org")))) throw runNotFound(runId);
    throw new NotFoundError("dataset_not_found", `run ${runId} has no dataset ${JSON.stringify(name)}`);
  }
  const sheets = new SheetClient({ env: c.env, location: found.location, meter: new SubrequestMeter() });
  if (query.format === "csv") {
    return new Response(csvStream(sheets, runId, found.total), {
      headers: { "Content-Type": "text/csv; charset=utf-8", "Content-Disposition": `attachment; filename="${name}.csv"` },
    });
  }
  const rows = await readPage(sheets, runId, query.offset, query.limit);
  return c.json({ rows, total: found.total, offset: query.offset, limit: query.limit });
});

/**
 * Streams the dataset a page at a time: never more than one page in memory.
 * Columns are those of the first page (input, computed, then `_key`, `_status`, `_error`).
 */
function csvStream(sheets: SheetClient, runId: string, total: number): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let offset = 0;
  let columns: string[] | null = null;
  return new ReadableStream({
    async pull(controller) {
      if (offset >= total) return controller.close();
      const rows = await readPage(sheets, runId, offset, CSV_PAGE_ROWS);
      if (!rows.length) return controller.close();
      offset += CSV_PAGE_ROWS;
      const first = columns === null;
      columns ??= orderColumns(rows);
      const cells = rows.map((row) => columns!.map((col) => cellOf(row[col])));
      controller.enqueue(encoder.encode(stringify(first ? [columns, ...cells] : cells)));
    },
  });
}

function orderColumns(rows: Record<string, unknown>[]): string[] {
  const meta = ["_key", "_status", "_error"];
  const seen = new Set<string>();
  for (const row of rows) for (const key of Object.keys(row)) if (!meta.includes(key)) seen.add(key);
  return [...seen, ...meta];
}

function cellOf(value: unknown): string {
  if (value === null || value === undefined) return "";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}
