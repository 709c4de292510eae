/**
 * Writes a dataset export a part at a time, each part in an invocation of
 * its own (API.md "Datasets"; DESIGN.md "Where chunk work runs"). One request
 * cannot export a large dataset by itself in production: every page is a call
 * per shard, and an invocation may make 10,000 (a 10M-row dataset needs about
 * 50,000), with 30 s of CPU to write what it reads. The request that serves
 * the export only stitches parts: it asks this object for the rows from an
 * index on, pipes the bytes it answers into its response without touching
 * them, and asks for the next part where that one ended. Each part reads a
 * few rounds of pages (`exportPartRounds`: at most a call per shard, 8,000
 * rows and 16 MiB of data each) under its own subrequest cap and CPU.
 *
 * It keeps nothing: an export is named by a fresh id, so concurrent exports
 * run in objects of their own (one object per export, a call per part).
 */
import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { faultProbeFor } from "../clients/faults";
import { SheetClient } from "../clients/shards";
import { parseRpcInput } from "../core/errors";
import { SubrequestMeter } from "../core/meter";
import { subrequestCapFor } from "../core/platform-limits";
import type { Row } from "../play/types";
import { ExportFormat, exportStream } from "../runtime/map/dataset-export";
import { rowPagesInOrder } from "../runtime/map/dataset-view";

export const ExportPartRequest = z.object({
  location: z.object({
    org: z.string().min(1).max(100),
    play: z.string().min(1).max(200),
    dataset: z.string().min(1).max(200),
    shardCount: z.number().int().min(1).max(1024),
  }),
  runId: z.string().min(1).max(100),
  /** The map's row count: rows at input indexes below it. */
  total: z.number().int().nonnegative(),
  /** The first input index of this part (0, or where the last part said the rest starts). */
  fromIndex: z.number().int().nonnegative(),
  /** Rounds of reads this part makes before it ends (see `rowPagesInOrder`). */
  maxRounds: z.number().int().min(1).max(1_000),
  format: ExportFormat,
});
export type ExportPartRequest = z.infer<typeof ExportPartRequest>;

/** One part: its bytes, and, once they have all been read, the index the next part starts at (null after the last row). */
export interface ExportPart {
  body: ReadableStream<Uint8Array>;
  next(): Promise<number | null>;
}

export class DatasetExporter extends DurableObject<Env> {
  /**
   * The part of the export from `fromIndex` on. Its first page is read
   * before this returns, so a failed read rejects the call (the serving
   * request answers an error rather than a cut-off file).
   */
  async exportPart(request: ExportPartRequest): Promise<ExportPart> {
    const part = parseRpcInput(ExportPartRequest, request);
    await faultProbeFor(this.env).check("export.part");
    const meter = new SubrequestMeter({ cap: subrequestCapFor(this.env) });
    const sheets = new SheetClient({ env: this.env, location: part.location, meter });
    const pages = rowPagesInOrder(sheets, part.runId, part.total, { fromIndex: part.fromIndex, maxRounds: part.maxRounds });
    const first = await pages.next();
    if (first.done) return { body: exportStream(nothingLeft(), part.format, []), next: async () => first.value };
    let settle: (next: number | null | Error) => void = () => {};
    const next = new Promise<number | null | Error>((resolve) => (settle = resolve));
    async function* rest(): AsyncGenerator<Row[], void> {
      try {
        settle(yield* pages);
      } finally {
        // Cancelled or failed before its last page: there is no next part to name.
        settle(new Error("the part did not finish: its bytes were cancelled or failed"));
      }
    }
    return {
      body: exportStream(rest(), part.format, first.value),
      next: async () => {
        const after = await next;
        if (after instanceof Error) throw after;
        return after;
      },
    };
  }
}

async function* nothingLeft(): AsyncGenerator<Row[], void> {}
