/**
 * The rows of one shard of a persistent dataset, the attempt leases that fence
 * writes to them, and each run's membership (its input rows, in input order).
 * Plain logic over the `Sql` helper: it knows nothing of Durable Objects, so the
 * actor decides the transaction and the alarm.
 */
import { z } from "zod";
import { ValidationError } from "../shared/errors";
import type {
  AttemptRef,
  ClaimRowsRequest,
  ClaimedRow,
  LeaseRequest,
  LeaseResult,
  PersistRowsRequest,
  PersistRowsResult,
  ReadRunRowsRequest,
  SheetRow,
} from "./contracts";
import type { Sql } from "./sql";

/** Schema migrations, in order (see `migrate`). */
export const SHEET_MIGRATIONS: readonly string[] = [
  `CREATE TABLE dataset (id INTEGER PRIMARY KEY CHECK (id = 1), shard_count INTEGER NOT NULL);
   CREATE TABLE sheet_rows (
     key TEXT PRIMARY KEY,
     status TEXT NOT NULL CHECK (status IN ('pending', 'completed', 'failed')),
     data TEXT NOT NULL,
     error TEXT,
     written_by_run TEXT,
     written_by_attempt TEXT,
     lease_attempt_id TEXT,
     lease_run_id TEXT,
     lease_seq INTEGER,
     lease_expires_at INTEGER,
     updated_at INTEGER NOT NULL
   ) WITHOUT ROWID;
   CREATE INDEX sheet_rows_lease_expires_at ON sheet_rows (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
   CREATE TABLE run_rows (
     run_id TEXT NOT NULL,
     idx INTEGER NOT NULL,
     key TEXT NOT NULL,
     PRIMARY KEY (run_id, idx)
   ) WITHOUT ROWID;`,
];

/** Largest serialized row data (input or output) a shard stores. */
export const MAX_ROW_DATA_BYTES = 1024 * 1024;
/** Most rows one `readRunRows` returns. */
export const MAX_READ_ROWS = 1000;
/**
 * Budget, in UTF-16 code units, of one JSON array parameter. SQLite in Durable
 * Objects caps a bound string at 2 MB; 512 Ki code units is at most 1.5 MiB of
 * UTF-8. A batch always holds at least one item, and one item is at most
 * MAX_ROW_DATA_BYTES plus its key.
 */
const MAX_PARAM_CHARS = 512 * 1024;

export const EnsureDatasetRequest = z.object({ shardCount: z.number().int().min(1).max(256) });
export type EnsureDatasetRequest = z.infer<typeof EnsureDatasetRequest>;

export const CountRunRowsRequest = z.object({ runId: z.string().min(1).max(100) });
export type CountRunRowsRequest = z.infer<typeof CountRunRowsRequest>;

/** `countRunChunks`: a run's rows counted per chunk of `chunkRows` input positions. */
export const CountRunChunksRequest = z.object({ runId: z.string().min(1).max(100), chunkRows: z.number().int().min(1).max(100_000) });
export type CountRunChunksRequest = z.infer<typeof CountRunChunksRequest>;

/** A run's rows in this shard whose input index falls in one chunk (`floor(index / chunkRows)`), by status. */
export type RunChunkCounts = {
  chunk: number;
  total: number;
  completed: number;
  failed: number;
};

/** A run's membership in this shard, by row status. */
export interface RunRowCounts {
  total: number;
  completed: number;
  failed: number;
  pending: number;
}

type RowRecord = {
  key: string;
  status: string;
  data: string;
  error: string | null;
  written_by_attempt: string | null;
  written_by_run: string | null;
  lease_attempt_id: string | null;
  lease_run_id: string | null;
  lease_seq: number | null;
  lease_expires_at: number | null;
};

type RunRowRecord = { idx: number; key: string; status: string; data: string; error: string | null };

const RowData = z.record(z.string(), z.unknown());
const RowStatus = z.enum(["pending", "completed", "failed"]);

/**
 * One shard's rows. Every method is synchronous and meant to run inside one
 * storage transaction; `now` is read once per call.
 *
 * @example
 * const store = new SheetStore({ sql: createSql(ctx.storage), now: Date.now });
 * ctx.storage.transactionSync(() => store.claimRows(request));
 */
export class SheetStore {
  readonly #sql: Sql;
  readonly #now: () => number;

  constructor(options: { sql: Sql; now: () => number }) {
    this.#sql = options.sql;
    this.#now = options.now;
  }

  /** Records the dataset's shard count the first time; afterwards returns the recorded one. */
  ensureDataset(shardCount: number): number {
    this.#sql.write`INSERT OR IGNORE INTO dataset (id, shard_count) VALUES (1, ${shardCount})`;
    return this.#sql<{ shard_count: number }>`SELECT shard_count FROM dataset WHERE id = 1`[0]!.shard_count;
  }

  /**
   * Records the run's membership, then claims each row for the attempt, in
   * request order: `blocked` when another live attempt holds its lease (a newer
   * attempt of the same run takes the lease over), `completed` when it can be
   * reused, else `pending` with a lease until now + leaseTtlMs (a new row is
   * stored with its input as data). Throws ValidationError for an input that
   * is not an object or is over MAX_ROW_DATA_BYTES.
   */
  claimRows(request: ClaimRowsRequest): ClaimedRow[] {
    const { attempt, recompute } = request;
    const now = this.#now();
    const inputs = request.rows.map((row) => ({ ...row, text: serializeRowData(row.key, row.input) }));
    for (const batch of batches(inputs, (row) => row.key.length)) {
      const members = JSON.stringify(batch.map(({ key, index }) => ({ key, index })));
      this.#sql.write`INSERT OR IGNORE INTO run_rows (run_id, idx, key)
        SELECT ${attempt.runId}, j.value ->> 'index', j.value ->> 'key' FROM json_each(${members}) j`;
    }

    const current = this.#load(inputs.map((row) => row.key));
    const leased = new Set<string>();
    const created = new Map<string, string>();
    const claimed = inputs.map((row): ClaimedRow => {
      const record = current.get(row.key);
      const blocker = record && blockingLease(record, attempt, now);
      if (blocker) return { key: row.key, status: "blocked", ...blocker };
      const ours = record?.lease_attempt_id === attempt.attemptId;
      if (!ours && record?.status === "completed" && !(recompute && record.written_by_run !== attempt.runId)) {
        return { key: row.key, status: "completed", data: parseRowData(record.data) };
      }
      if (!record) created.set(row.key, row.text);
      leased.add(row.key);
      // Later duplicates of this key in the same request see it as ours.
      current.set(row.key, { ...(record ?? newRecord(row.key, row.text)), lease_attempt_id: attempt.attemptId });
      return { key: row.key, status: "pending" };
    });

    const expiresAt = now + request.leaseTtlMs;
    for (const batch of batches([...created], ([key, text]) => key.length + text.length)) {
      const rows = `[${batch.map(([key, text]) => `{"key":${JSON.stringify(key)},"data":${text}}`).join(",")}]`;
      this.#sql.write`INSERT INTO sheet_rows
        (key, status, data, error, lease_attempt_id, lease_run_id, lease_seq, lease_expires_at, updated_at)
        SELECT j.value ->> 'key', 'pending', j.value -> '$.data', NULL, ${attempt.attemptId}, ${attempt.runId}, ${attempt.attemptSeq}, ${expiresAt}, ${now}
        FROM json_each(${rows}) j`;
    }
    const existing = [...leased].filter((key) => !created.has(key));
    for (const batch of batches(existing, (key) => key.length)) {
      this.#sql.write`UPDATE sheet_rows SET lease_attempt_id = ${attempt.attemptId}, lease_run_id = ${attempt.runId},
        lease_seq = ${attempt.attemptSeq}, lease_expires_at = ${expiresAt}, updated_at = ${now}
        WHERE key IN (SELECT value FROM json_each(${JSON.stringify(batch)}))`;
    }
    return claimed;
  }

  /**
   * Fenced write of terminal rows. A row is written only while this attempt
   * still holds its lease (even an expired one nobody else has taken); the
   * write clears the lease. A row this attempt already wrote, with no lease on
   * it since, counts as written again. Everything else is rejected, unwritten.
   * A key repeated within one request is written once, by its first occurrence.
   */
  persistRows(request: PersistRowsRequest): PersistRowsResult {
    const { attempt } = request;
    const rows = request.rows.map((row) => ({ ...row, text: serializeRowData(row.key, row.data) }));
    const current = this.#load(rows.map((row) => row.key));
    const written: string[] = [];
    const rejected: string[] = [];
    const writes: typeof rows = [];
    for (const row of rows) {
      const record = current.get(row.key);
      if (record?.lease_attempt_id === attempt.attemptId) {
        writes.push(row);
        written.push(row.key);
        current.set(row.key, { ...record, status: row.status, written_by_attempt: attempt.attemptId, lease_attempt_id: null });
      } else if (record && record.status !== "pending" && record.written_by_attempt === attempt.attemptId && record.lease_attempt_id === null) {
        written.push(row.key);
      } else {
        rejected.push(row.key);
      }
    }

    const now = this.#now();
    const size = (row: (typeof rows)[number]) => row.key.length + row.text.length + (row.error?.length ?? 0);
    for (const batch of batches(writes, size)) {
      const json = `[${batch
        .map((row) => `{"key":${JSON.stringify(row.key)},"status":${JSON.stringify(row.status)},"error":${JSON.stringify(row.error)},"data":${row.text}}`)
        .join(",")}]`;
      this.#sql.write`UPDATE sheet_rows SET status = j.value ->> 'status', data = j.value -> '$.data',
        error = j.value ->> 'error', written_by_run = ${attempt.runId}, written_by_attempt = ${attempt.attemptId},
        lease_attempt_id = NULL, lease_run_id = NULL, lease_seq = NULL, lease_expires_at = NULL, updated_at = ${now}
        FROM json_each(${json}) j WHERE sheet_rows.key = j.value ->> 'key' AND sheet_rows.lease_attempt_id = ${attempt.attemptId}`;
    }
    return { written, rejected };
  }

  /** Extends to now + leaseTtlMs the leases this attempt still holds; the other keys are lost. */
  renewLeases(request: LeaseRequest): LeaseResult {
    const { attempt } = request;
    const now = this.#now();
    const held = new Set<string>();
    for (const batch of batches(request.keys, (key) => key.length)) {
      const rows = this.#sql<{ key: string }>`UPDATE sheet_rows SET lease_expires_at = ${now + request.leaseTtlMs}, updated_at = ${now}
        WHERE lease_attempt_id = ${attempt.attemptId} AND key IN (SELECT value FROM json_each(${JSON.stringify(batch)}))
        RETURNING key`;
      for (const row of rows) held.add(row.key);
    }
    return { renewed: request.keys.filter((key) => held.has(key)), lost: request.keys.filter((key) => !held.has(key)) };
  }

  /** Clears every lease the run holds (teardown), returning how many. Row status is unchanged. */
  releaseRun(runId: string): number {
    // A run leases only rows it is a member of, so its membership bounds the scan.
    return this.#sql`UPDATE sheet_rows SET lease_attempt_id = NULL, lease_run_id = NULL, lease_seq = NULL, lease_expires_at = NULL
      WHERE lease_run_id = ${runId} AND key IN (SELECT key FROM run_rows WHERE run_id = ${runId})
      RETURNING 1 AS released`.length;
  }

  /** The run's rows with input index in [fromIndex, toIndex), in index order, at most MAX_READ_ROWS. */
  readRunRows(request: ReadRunRowsRequest): SheetRow[] {
    const toIndex = Math.min(request.toIndex, request.fromIndex + MAX_READ_ROWS);
    return this.#sql<RunRowRecord>`SELECT rr.idx AS idx, r.key AS key, r.status AS status, r.data AS data, r.error AS error
      FROM run_rows rr JOIN sheet_rows r ON r.key = rr.key
      WHERE rr.run_id = ${request.runId} AND rr.idx >= ${request.fromIndex} AND rr.idx < ${toIndex}
      ORDER BY rr.idx`.map(rowToSheetRow);
  }

  /** Counts the run's membership by the rows' current status. */
  countRunRows(runId: string): RunRowCounts {
    const row = this.#sql<{ total: number; completed: number; failed: number }>`SELECT count(*) AS total,
      coalesce(sum(r.status = 'completed'), 0) AS completed, coalesce(sum(r.status = 'failed'), 0) AS failed
      FROM run_rows rr JOIN sheet_rows r ON r.key = rr.key WHERE rr.run_id = ${runId}`[0]!;
    return { ...row, pending: row.total - row.completed - row.failed };
  }

  /** The run's membership counted per chunk of `chunkRows` input indexes (chunks with no row here are absent). */
  countRunChunks(request: CountRunChunksRequest): RunChunkCounts[] {
    // A bound JS number may arrive as REAL: cast, so that the division is an integer one.
    return this.#sql<RunChunkCounts>`SELECT rr.idx / CAST(${request.chunkRows} AS INTEGER) AS chunk, count(*) AS total,
      coalesce(sum(r.status = 'completed'), 0) AS completed, coalesce(sum(r.status = 'failed'), 0) AS failed
      FROM run_rows rr JOIN sheet_rows r ON r.key = rr.key WHERE rr.run_id = ${request.runId}
      GROUP BY chunk ORDER BY chunk`;
  }

  /** Frees leases expired at now (status unchanged), returning how many. Idempotent. */
  expireLeases(): number {
    return this.#sql`UPDATE sheet_rows SET lease_attempt_id = NULL, lease_run_id = NULL, lease_seq = NULL, lease_expires_at = NULL
      WHERE lease_expires_at <= ${this.#now()} RETURNING 1 AS expired`.length;
  }

  /** The earliest lease expiry (epoch ms), or null when no lease is held: when the alarm should fire. */
  nextLeaseExpiry(): number | null {
    const row = this.#sql<{ next: number | null }>`SELECT min(lease_expires_at) AS next FROM sheet_rows WHERE lease_expires_at IS NOT NULL`[0];
    return row?.next ?? null;
  }

  #load(keys: readonly string[]): Map<string, RowRecord> {
    const found = new Map<string, RowRecord>();
    for (const batch of batches([...new Set(keys)], (key) => key.length)) {
      for (const row of this.#sql<RowRecord>`SELECT key, status, data, error, written_by_attempt, written_by_run,
          lease_attempt_id, lease_run_id, lease_seq, lease_expires_at
          FROM sheet_rows WHERE key IN (SELECT value FROM json_each(${JSON.stringify(batch)}))`) {
        found.set(row.key, row);
      }
    }
    return found;
  }
}

/**
 * The row's live lease when it bars this attempt. An expired lease, our own
 * lease, and a lease of an older attempt of our run (taken over) do not.
 */
function blockingLease(record: RowRecord, attempt: AttemptRef, now: number): { owner: AttemptRef; leaseExpiresAt: number } | undefined {
  const { lease_attempt_id: attemptId, lease_run_id: runId, lease_seq: attemptSeq, lease_expires_at: leaseExpiresAt } = record;
  if (attemptId === null || runId === null || attemptSeq === null || leaseExpiresAt === null || leaseExpiresAt <= now) return undefined;
  if (attemptId === attempt.attemptId) return undefined;
  if (runId === attempt.runId && attemptSeq < attempt.attemptSeq) return undefined;
  return { owner: { attemptId, runId, attemptSeq }, leaseExpiresAt };
}

function newRecord(key: string, data: string): RowRecord {
  return {
    key, status: "pending", data, error: null, written_by_attempt: null, written_by_run: null,
    lease_attempt_id: null, lease_run_id: null, lease_seq: null, lease_expires_at: null,
  };
}

function rowToSheetRow(row: RunRowRecord): SheetRow {
  return { index: row.idx, key: row.key, status: RowStatus.parse(row.status), data: parseRowData(row.data), error: row.error };
}

function parseRowData(text: string): Record<string, unknown> {
  return RowData.parse(JSON.parse(text));
}

/** JSON text of a row's data; throws ValidationError unless it is an object within MAX_ROW_DATA_BYTES. */
function serializeRowData(key: string, data: unknown): string {
  if (typeof data !== "object" || data === null || Array.isArray(data)) {
    throw new ValidationError(`[invalid_request] row ${JSON.stringify(key)}: data must be a JSON object`);
  }
  const text = JSON.stringify(data);
  // A UTF-16 code unit is at most 3 UTF-8 bytes: encode only when the cheap bound is not enough.
  if (text.length * 3 > MAX_ROW_DATA_BYTES && new TextEncoder().encode(text).byteLength > MAX_ROW_DATA_BYTES) {
    throw new ValidationError(`[invalid_request] row ${JSON.stringify(key)}: data is over ${MAX_ROW_DATA_BYTES} bytes`);
  }
  return text;
}

/** Splits items into consecutive non-empty batches of at most MAX_PARAM_CHARS (a lone larger item is its own batch). */
function* batches<T>(items: readonly T[], sizeOf: (item: T) => number): Generator<T[]> {
  let batch: T[] = [];
  let chars = 0;
  for (const item of items) {
    const size = sizeOf(item) + 32;
    if (batch.length > 0 && chars + size > MAX_PARAM_CHARS) {
      yield batch;
      batch = [];
      chars = 0;
    }
    batch.push(item);
    chars += size;
  }
  if (batch.length > 0) yield batch;
}
