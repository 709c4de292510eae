/** A run's view of a dataset: JSON pages (by offset or cursor), or the whole dataset streamed as CSV or NDJSON. */
import { Hono } from "hono";
import { z } from "zod";
import { MAX_PAGE_ROWS, readPage, readPageFrom, rowFields } from "../runtime/map/dataset-view";
import { csvHeader, type ExportFormat, META_COLUMNS } from "../runtime/map/dataset-export";
import type { ExportPartRequest } from "../actors/DatasetExporter";
import { subrequestCapFor } from "../core/platform-limits";
import { policyFor } from "../core/policy";
import { decodeDatasetCursor, encodeDatasetCursor } from "../runtime/map/dataset-cursor";
import { SubrequestMeter } from "../core/meter";
import { SheetClient } from "../clients/shards";
import { messageOf, NotFoundError } from "../core/errors";
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
    // The header a started dataset with no rows has (csv-stringify's line ending).
    if (query.format === "csv")
      return exported(csvHeader({ format: "csv", columns: [...META_COLUMNS], escapeFormulas: query.safe === "1" }), name, "csv");
    if (query.format === "ndjson") return exported("", name, "ndjson");
    // No cursor was given out for it: any is refused as one that points past its end.
    if (query.cursor !== undefined) decodeDatasetCursor(query.cursor, { runId, dataset: name }, 0);
    return c.json({ rows: [], total: 0, offset: query.offset ?? 0, limit: query.limit, nextCursor: null });
  }
  const { total } = found;
  const meter = new SubrequestMeter({ cap: subrequestCapFor(c.env) });
  const sheets = new SheetClient({ env: c.env, location: found.location, meter });
  if (query.format === "csv") {
    // The columns are found before the response starts, so a failed read is an error response, not a cut-off file.
    const columns = await datasetColumns(sheets, runId);
    const format = { format: "csv" as const, columns, escapeFormulas: query.safe === "1" };
    return exported(await exportInParts(c.env, meter, { runId, total, location: found.location }, format), name, "csv");
  }
  if (query.format === "ndjson")
    return exported(await exportInParts(c.env, meter, { runId, total, location: found.location }, { format: "ndjson" }), name, "ndjson");
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
 * The export's bytes, written by `DatasetExporter` a part at a time, each in
 * a call of its own; this request asks for each part and pipes its bytes on
 * through an `IdentityTransformStream` (the runtime moves them without running
 * JavaScript per chunk), so it spends a call or two per part of up to
 * `exportPartRounds` × 8,000 rows, besides a CSV's column scan (a call per
 * shard for every 50,000 rows or 8 MiB of its data). The first part is asked
 * for before the response starts, so a failed first read is an error
 * response, not a cut-off file; a later failure errors the download (the
 * client sees it end early, never a file with rows missing inside).
 */
async function exportInParts(
  env: Env,
  meter: SubrequestMeter,
  dataset: Pick<ExportPartRequest, "runId" | "total" | "location">,
  format: ExportFormat,
): Promise<ReadableStream<Uint8Array>> {
  const exporter = env.DATASET_EXPORTER.getByName(`${dataset.runId}/${dataset.location.dataset}/${crypto.randomUUID()}`);
  const request = { ...dataset, format, maxRounds: policyFor(env).exportPartRounds };
  const partFrom = (fromIndex: number) => {
    meter.countRpc("exporter.exportPart");
    return exporter.exportPart({ ...request, fromIndex });
  };
  let part = await partFrom(0);
  const { readable, writable } = new IdentityTransformStream();
  const stitch = async () => {
    if (format.format === "csv") {
      const writer = writable.getWriter();
      await writer.write(csvHeader(format));
      writer.releaseLock();
    }
    for (;;) {
      // Each part's result (its stub of `next`) is let go once read, not held until the download ends.
      let next: number | null;
      try {
        await part.body.pipeTo(writable, { preventClose: true });
        meter.countRpc("exporter.next");
        next = await part.next();
      } finally {
        part[Symbol.dispose]();
      }
      if (next === null) return writable.close();
      part = await partFrom(next);
    }
  };
  stitch().catch(async (error: unknown) => {
    // The client went away, or a part failed: the download ends early rather than missing rows inside.
    console.warn(`export of run ${dataset.runId}'s ${dataset.location.dataset} stopped: ${messageOf(error)}`);
    await part.body.cancel().catch(() => {});
    await writable.abort(error).catch(() => {});
  });
  return readable;
}
