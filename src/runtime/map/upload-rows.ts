/**
 * A chunk's rows read from the run's upload when its attempt runs (docs/api.md
 * "Large inputs: uploads"): only the bytes holding rows `[from, to)` are read
 * (src/uploads/range-reader.ts), so neither the coordinator nor an executor
 * ever holds the whole input. Each row is checked against the play's row
 * schema here; a row that does not fit, or has no key, is planned as
 * `invalid` and fails alone, naming its line, while its chunk runs on.
 */
import type { z } from "zod";
import { messageOf, TerminalError } from "../../core/errors";
import type { PlannedRow, UploadSlice } from "../../contracts/shards";
import type { FaultProbe } from "../../clients/faults";
import type { MapOptions, Row } from "../../play/types";
import { readRows } from "../../uploads/range-reader";
import { uploadNotFound } from "../../uploads/errors";
import { type OpenUpload, Uploads } from "../../uploads/uploads";
import { contentKey, keyOfRow } from "./row-keys";

export interface UploadRowsOptions {
  bucket: R2Bucket;
  org: string;
  /** The map's `key` option. */
  key: MapOptions["key"];
  /** The play's row schema (`rowsInput`); null takes rows as they are. */
  schema: z.ZodType<Row, unknown> | null;
  /** Injected faults (`upload.read`: after a chunk's bytes are read, before its rows are claimed). */
  faults?: FaultProbe;
  /** Opened uploads shared beyond this reader (an executor keeps them across its attempts); else its own. */
  opened?: Map<string, Promise<OpenUpload>>;
}

export class UploadRows {
  #deps: UploadRowsOptions;
  #uploads: Uploads;
  /** Opened once per upload: its index says where every 100th row (or so) starts. */
  #open: Map<string, Promise<OpenUpload>>;

  constructor(options: UploadRowsOptions) {
    this.#deps = options;
    this.#open = options.opened ?? new Map();
    this.#uploads = new Uploads({ bucket: options.bucket, org: options.org });
  }

  /** How many rows the upload holds; `upload_not_found` (terminal) when this org has no such ready upload. */
  async count(upload: string): Promise<number> {
    return (await this.#opened(upload)).index.rows;
  }

  /** The upload's rows and bytes (its header included). */
  async size(upload: string): Promise<{ rows: number; bytes: number }> {
    const { index } = await this.#opened(upload);
    return { rows: index.rows, bytes: index.bytes };
  }

  /**
   * How many of the upload's first rows (at most `maxRows`, at least one of a non-empty file) its first `maxBytes` of
   * rows hold, from its index: whole blocks between indexed positions, then part of the next at that block's own
   * average row size (wide rows at the start of a file of narrow ones are not taken at the file's average).
   */
  async rowsWithin(upload: string, maxRows: number, maxBytes: number): Promise<number> {
    const { index } = await this.#opened(upload);
    const limit = Math.min(maxRows, index.rows);
    const start = index.positions.at(0)?.offset ?? 0;
    let rows = 0;
    for (let i = 0; rows < limit; i++) {
      const from = index.positions.at(i);
      if (!from) break;
      const blockRows = Math.min(index.every, index.rows - i * index.every);
      const end = index.positions.at(i + 1)?.offset ?? index.bytes;
      if (end - start <= maxBytes) {
        rows = Math.min(limit, i * index.every + blockRows);
        continue;
      }
      const perRow = (end - from.offset) / Math.max(1, blockRows);
      rows = Math.min(limit, i * index.every + Math.floor((maxBytes - (from.offset - start)) / perRow));
      break;
    }
    return limit > 0 ? Math.max(1, rows) : 0;
  }

  /** Rows `[from, to)` of the upload, keyed; `index` is the row's place in the file (0-based, header excluded). */
  async read(slice: UploadSlice): Promise<PlannedRow[]> {
    const { index, source } = await this.#opened(slice.upload);
    const rows = await readRows(source, index, { from: slice.from, to: slice.to });
    await this.#deps.faults?.check("upload.read");
    const planned: PlannedRow[] = [];
    for (const { index: i, line, row } of rows) planned.push(await this.#plan(row, i, line, slice.upload));
    return planned;
  }

  /** A row that does not fit (or throws in the schema's transforms or the key function) fails on its own, not its chunk. */
  async #plan(raw: Row, index: number, line: number, upload: string): Promise<PlannedRow> {
    const { key, schema } = this.#deps;
    const parsed = checked(schema, raw);
    const input = parsed.success ? parsed.data : raw;
    const keyed = await rowKey(input, index, key);
    if (typeof keyed !== "string") return { key: lineKey(line, upload), index, input: raw, invalid: `line ${line}: ${keyed.error}` };
    if (!parsed.success) return { key: keyed, index, input: raw, invalid: `line ${line}: ${parsed.error}` };
    return { key: keyed, index, input };
  }

  #opened(upload: string): Promise<OpenUpload> {
    let open = this.#open.get(upload);
    if (!open) {
      open = this.#uploads.open(upload).then((opened) => {
        if (!opened) throw new TerminalError("upload_not_found", `${uploadNotFound(upload).message}: the run's input is gone`);
        return opened;
      });
      // A failed open (storage unreachable) is tried again by the next read.
      open.catch(() => this.#open.delete(upload));
      this.#open.set(upload, open);
    }
    return open;
  }
}

/**
 * The key of a row with none of its own: its line, scoped by its upload. A rerun of the same upload makes the same
 * keys; line n of another upload into the dataset, or a user's key `#line:n`, is another row (one key would make
 * them one dataset row, each source's version replacing the other's).
 */
function lineKey(line: number, upload: string): string {
  return `#line:${line}:${upload}`;
}

/** The row as the schema makes it, or what is wrong with it (a transform that throws included). */
function checked(schema: UploadRowsOptions["schema"], raw: Row): { success: true; data: Row } | { success: false; error: string } {
  if (!schema) return { success: true, data: raw };
  try {
    const parsed = schema.safeParse(raw);
    return parsed.success ? parsed : { success: false, error: issuesOf(parsed.error) };
  } catch (error) {
    return { success: false, error: `the row schema threw: ${messageOf(error).slice(0, 500)}` };
  }
}

/** The row's key as `planRows` makes it for rows in hand, or why it has none. */
async function rowKey(input: Row, index: number, key: MapOptions["key"]): Promise<string | { error: string }> {
  if (key !== undefined) return keyOfRow(input, index, key);
  try {
    return await contentKey(input, index);
  } catch (error) {
    // A value JSON cannot hold (a transform's Map or cycle, say): canonicalJson refuses it.
    return { error: `has no key (its content cannot be hashed: ${messageOf(error).slice(0, 500)})` };
  }
}

function issuesOf(error: z.ZodError): string {
  return error.issues
    .slice(0, 5)
    .map((issue) => (issue.path.length ? `${issue.path.map(String).join(".")}: ${issue.message}` : issue.message))
    .join("; ")
    .slice(0, 2000);
}
