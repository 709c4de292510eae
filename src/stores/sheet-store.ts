/**
 * The rows of one shard of a persistent dataset, the attempt leases that fence
 * writes to them, and each run's membership (its input rows, in input order).
 * Plain logic over the `Sql` helper: it knows nothing of Durable Objects, so the
 * actor decides the transaction and the alarm.
 *
 * A row is a list of **versions**; its head names the latest one and carries
 * the lease. A version is computed once, by the run that created it, and never
 * changes after it is terminal. A run's membership names the version it
 * computed or reused, so what a run returns and exports is fixed when it ends:
 *
 * - a completed version is reused only for the same input (a digest of its
 *   canonical JSON), and under `recompute` only by the run that wrote it: the
 *   latest, or else the newest version computed from that input (a key an
 *   upload repeats with other inputs reuses each one's own on a rerun);
 * - anything else (a new key, a changed input, a failed row, `force`) gets a
 *   new version; a pending version is taken over only by a later attempt of
 *   the run that created it.
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import { canonicalJson } from "../core/hash";
import { ValidationError } from "../core/errors";
import { MAX_JSON_DEPTH, tooDeepAt } from "../core/json-depth";
import { utf8BytesPast } from "../core/utf8";
import type {
  AttemptRef,
  ClaimRowsRequest,
  ClaimedRow,
  LeaseRequest,
  LeaseResult,
  PeekRowsRequest,
  PersistRowsRequest,
  PersistRowsResult,
  ReadRunRowsRequest,
  SheetRow,
} from "../contracts/shards";
import { batches, type Sql } from "./sql";
import { blockingLease, newRecord, resumable, reusable, type RowRecord, servesUnderRecompute } from "./row-versions";
import {
  MAX_READ_CHARS,
  MAX_READ_ROWS,
  MAX_COLUMN_SCAN_ROWS,
  MAX_RUN_COLUMNS,
  type CountRunChunksRequest,
  type RunChunkCounts,
  type RunColumnsRequest,
  type RunColumnsScan,
  type RunRowCounts,
  type RunRowsRead,
} from "../contracts/shards";

/** Largest serialized row data (input or output) a shard stores. */
export const MAX_ROW_DATA_BYTES = 1024 * 1024;

type RunRowRecord = { idx: number; key: string; status: string; data: string; error: string | null };

/** A row settled in a run's view: its version's status and error; `own`: this run wrote that version. */
type Settled = { status: "completed" | "failed"; error: string | null; own: boolean };

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
   * Claims each row for the attempt and records which version the run's view
   * holds, in request order: every row `fenced` (nothing recorded) when a
   * newer epoch of the run has claimed here (see #fence), else `blocked` when another live attempt holds its
   * lease (a newer attempt of the same run takes the lease over), `completed`
   * when its latest version can be reused (see the module comment), else
   * `pending` with a lease until now + leaseTtlMs on the version this attempt
   * computes (a new one holds the input as data). Throws ValidationError for
   * an input to be stored as a new version that is not an object or is over
   * MAX_ROW_DATA_BYTES. With `reuseOnly`, only the reused rows are recorded:
   * the others are answered but neither leased nor versioned (a rerun's sweep).
   */
  claimRows(request: ClaimRowsRequest): ClaimedRow[] {
    const { attempt, recompute } = request;
    const now = this.#now();
    const newerSeq = this.#fence(attempt);
    if (newerSeq !== null) return request.rows.map((row) => ({ key: row.key, status: "fenced", newerSeq }));
    const inputs = request.rows.map((row) => ({ ...row, digest: inputDigest(row.input) }));
    // Rows this run's view already holds settled (a chunk claimed again: blocked, redispatched, repaired) stay so.
    const settled = request.reuseOnly ? new Map<number, Settled>() : this.#settled(attempt.runId, inputs);
    const current = this.#load(inputs.filter((row) => !settled.has(row.index)).map((row) => row.key));
    const members: Array<{ key: string; index: number; version: number | null }> = [];
    const leased = new Set<string>();
    const created = new Map<string, { version: number; text: string; digest: string }>();
    const claimed = inputs.map((row): ClaimedRow => {
      const done = settled.get(row.index);
      if (done?.status === "failed") return { key: row.key, status: "failed", error: done.error };
      if (done) return done.own ? { key: row.key, status: "completed", own: true } : { key: row.key, status: "completed" };
      const record = current.get(row.key);
      const blocker = record && blockingLease(record, attempt, now);
      if (blocker) {
        if (request.reuseOnly) return { key: row.key, status: "blocked", ...blocker };
        // Not the run's row yet: its view gets a version once a claim succeeds.
        members.push({ key: row.key, index: row.index, version: null });
        return { key: row.key, status: "blocked", ...blocker };
      }
      const reuse = record ? this.#reusableVersion(record, row.digest, attempt, recompute) : null;
      if (reuse !== null) {
        members.push({ key: row.key, index: row.index, version: reuse });
        return { key: row.key, status: "completed" };
      }
      if (request.reuseOnly) return { key: row.key, status: "pending" };
      if (leased.has(row.key) && record!.input_digest !== row.digest) {
        // The key again with another input: it gets its own version once this attempt persisted the first (the
        // chunk is claimed again at once). Given one now, the first's version would never be written, and the row
        // the attempt wrote first would hold its output under the other input.
        members.push({ key: row.key, index: row.index, version: null });
        return { key: row.key, status: "blocked", owner: attempt, leaseExpiresAt: now };
      }
      let version = record?.version ?? 0;
      if (!record || !resumable(record, row.digest, attempt)) {
        version += 1;
        // Only a new version stores the input (a reused row's matched a stored one, which was checked then).
        created.set(row.key, { version, text: serializeRowData(row.key, row.input), digest: row.digest });
      }
      leased.add(row.key);
      members.push({ key: row.key, index: row.index, version });
      // Later duplicates of this key in the same request see it as ours.
      current.set(row.key, {
        ...(record ?? newRecord(row.key)),
        version,
        status: "pending",
        input_digest: row.digest,
        created_by_run: attempt.runId,
        lease_attempt_id: attempt.attemptId,
      });
      return { key: row.key, status: "pending" };
    });

    for (const batch of batches(members, (m) => m.key.length)) {
      this.#sql.write`INSERT INTO run_rows (run_id, idx, key, version)
        SELECT ${attempt.runId}, j.value ->> 'index', j.value ->> 'key', j.value ->> 'version' FROM json_each(${JSON.stringify(batch)}) j WHERE true
        ON CONFLICT (run_id, idx) DO UPDATE SET key = excluded.key, version = coalesce(excluded.version, run_rows.version)`;
    }
    const fresh = [...created];
    for (const batch of batches(fresh, ([key, v]) => key.length + v.text.length)) {
      const rows = `[${batch.map(([key, v]) => `{"key":${JSON.stringify(key)},"version":${v.version},"digest":"${v.digest}","data":${v.text}}`).join(",")}]`;
      this.#sql.write`INSERT INTO row_versions (key, version, status, data, error, input_digest, created_by_run, updated_at)
        SELECT j.value ->> 'key', j.value ->> 'version', 'pending', j.value -> '$.data', NULL, j.value ->> 'digest', ${attempt.runId}, ${now}
        FROM json_each(${rows}) j`;
    }
    const expiresAt = now + request.leaseTtlMs;
    const heads = [...leased].map((key) => ({ key, version: current.get(key)!.version }));
    for (const batch of batches(heads, (h) => h.key.length)) {
      this.#sql.write`INSERT INTO row_heads (key, version, lease_attempt_id, lease_run_id, lease_seq, lease_expires_at)
        SELECT j.value ->> 'key', j.value ->> 'version', ${attempt.attemptId}, ${attempt.runId}, ${attempt.attemptSeq}, ${expiresAt}
        FROM json_each(${JSON.stringify(batch)}) j WHERE true
        ON CONFLICT (key) DO UPDATE SET version = excluded.version, lease_attempt_id = excluded.lease_attempt_id,
          lease_run_id = excluded.lease_run_id, lease_seq = excluded.lease_seq, lease_expires_at = excluded.lease_expires_at`;
    }
    return claimed;
  }

  /**
   * The newer epoch of the attempt's run that claimed here, when there is one
   * (the attempt is stale); else null, and the attempt's epoch is recorded as
   * the run's newest. Attempts of one epoch are one coordinator invocation's:
   * once a newer one claims, the older one's chunks were redispatched, so a
   * late start of one of them (an executor that held it unstarted while the
   * coordinator gave it up) must not lease rows again, nor re-execute a row
   * the newer epoch failed, nor point the run's view at another version.
   */
  #fence(attempt: AttemptRef): number | null {
    const newest = this.#sql<{ attempt_seq: number }>`SELECT attempt_seq FROM run_epochs WHERE run_id = ${attempt.runId}`[0]?.attempt_seq;
    if (newest !== undefined && newest > attempt.attemptSeq) return newest;
    if (newest !== attempt.attemptSeq)
      this.#sql.write`INSERT INTO run_epochs (run_id, attempt_seq) VALUES (${attempt.runId}, ${attempt.attemptSeq})
        ON CONFLICT (run_id) DO UPDATE SET attempt_seq = excluded.attempt_seq`;
    return null;
  }

  /**
   * Fenced write of terminal rows into the versions this attempt leased. A
   * row is written only while this attempt still holds its lease (even an
   * expired one nobody else has taken); the write clears the lease and the
   * version never changes again. A row this attempt already wrote, with no
   * lease on it since, counts as written again. Everything else is rejected,
   * unwritten. A key repeated within one request is written once, by its first
   * occurrence.
   */
  persistRows(request: PersistRowsRequest): PersistRowsResult {
    const { attempt } = request;
    const rows = request.rows.map((row) => ({ ...row, text: serializeRowData(row.key, row.data) }));
    const current = this.#load(rows.map((row) => row.key));
    const written: string[] = [];
    const rejected: string[] = [];
    const writes: Array<(typeof rows)[number] & { version: number }> = [];
    for (const row of rows) {
      const record = current.get(row.key);
      if (record?.lease_attempt_id === attempt.attemptId) {
        writes.push({ ...row, version: record.version });
        written.push(row.key);
        current.set(row.key, { ...record, status: row.status, written_by_attempt: attempt.attemptId, lease_attempt_id: null });
      } else if (
        record &&
        record.status !== "pending" &&
        record.written_by_attempt === attempt.attemptId &&
        record.lease_attempt_id === null
      ) {
        written.push(row.key);
      } else {
        rejected.push(row.key);
      }
    }

    const now = this.#now();
    const size = (row: (typeof rows)[number]) => row.key.length + row.text.length + (row.error?.length ?? 0);
    for (const batch of batches(writes, size)) {
      const json = `[${batch
        .map(
          (row) =>
            `{"key":${JSON.stringify(row.key)},"version":${row.version},"status":${JSON.stringify(row.status)},"error":${JSON.stringify(row.error)},"data":${row.text}}`,
        )
        .join(",")}]`;
      this.#sql.write`UPDATE row_versions SET status = j.value ->> 'status', data = j.value -> '$.data',
        error = j.value ->> 'error', written_by_run = ${attempt.runId}, written_by_attempt = ${attempt.attemptId}, updated_at = ${now}
        FROM json_each(${json}) j WHERE row_versions.key = j.value ->> 'key' AND row_versions.version = j.value ->> 'version'`;
      this.#sql.write`UPDATE row_heads SET lease_attempt_id = NULL, lease_run_id = NULL, lease_seq = NULL, lease_expires_at = NULL
        WHERE lease_attempt_id = ${attempt.attemptId} AND key IN (SELECT j.value ->> 'key' FROM json_each(${json}) j)`;
    }
    return { written, rejected };
  }

  /** The keys of `request.rows` whose latest version a run would reuse now (completed, same input); claims nothing. */
  peekRows(request: PeekRowsRequest): string[] {
    if (request.recompute) return [];
    const current = this.#load(request.rows.map((row) => row.key));
    return request.rows
      .filter((row) => {
        const record = current.get(row.key);
        return record !== undefined && record.status === "completed" && record.input_digest === inputDigest(row.input);
      })
      .map((row) => row.key);
  }

  /** Extends to now + leaseTtlMs the leases this attempt still holds; the other keys are lost. */
  renewLeases(request: LeaseRequest): LeaseResult {
    const { attempt } = request;
    const now = this.#now();
    const held = new Set<string>();
    for (const batch of batches(request.keys, (key) => key.length)) {
      const rows = this.#sql<{ key: string }>`UPDATE row_heads SET lease_expires_at = ${now + request.leaseTtlMs}
        WHERE lease_attempt_id = ${attempt.attemptId} AND key IN (SELECT value FROM json_each(${JSON.stringify(batch)}))
        RETURNING key`;
      for (const row of rows) held.add(row.key);
    }
    return { renewed: request.keys.filter((key) => held.has(key)), lost: request.keys.filter((key) => !held.has(key)) };
  }

  /**
   * Clears every lease the run holds (teardown), returning how many. Row
   * status is unchanged. With `fenceBelow`, a claim of the run's epochs before
   * it is refused from now on (see #fence): a run that parked or ended
   * leaves no attempt that may start late and lease its rows again.
   */
  releaseRun(runId: string, fenceBelow?: number): number {
    if (fenceBelow !== undefined)
      this.#sql.write`INSERT INTO run_epochs (run_id, attempt_seq) VALUES (${runId}, ${fenceBelow})
        ON CONFLICT (run_id) DO UPDATE SET attempt_seq = max(attempt_seq, excluded.attempt_seq)`;
    return this.#sql`UPDATE row_heads SET lease_attempt_id = NULL, lease_run_id = NULL, lease_seq = NULL, lease_expires_at = NULL
      WHERE lease_run_id = ${runId} RETURNING 1 AS released`.length;
  }

  /**
   * The run's rows with input index in [fromIndex, toIndex), in index order,
   * the first `limit` (at most MAX_READ_ROWS), and past the first row at most
   * `maxChars` of data and errors (MAX_READ_CHARS): the versions its view
   * holds. `cut` says the size ended it before the limit and the range. A
   * row the run found blocked and never claimed since is `pending` with no data.
   * A seek on the membership's primary key: it reads the rows it returns,
   * however deep `fromIndex` is, never the ones before it.
   */
  readRunRows(request: ReadRunRowsRequest): RunRowsRead {
    const limit = Math.min(request.limit ?? MAX_READ_ROWS, MAX_READ_ROWS);
    const maxChars = Math.min(request.maxChars ?? MAX_READ_CHARS, MAX_READ_CHARS);
    // Sizes first, so that no more rows are read than the answer carries.
    const sizes = this.#sql<{ idx: number; chars: number }>`SELECT rr.idx AS idx,
      coalesce(length(v.data), 2) + coalesce(length(v.error), 0) + length(rr.key) AS chars
      FROM run_rows rr LEFT JOIN row_versions v ON v.key = rr.key AND v.version = rr.version
      WHERE rr.run_id = ${request.runId} AND rr.idx >= ${request.fromIndex} AND rr.idx < ${request.toIndex}
      ORDER BY rr.idx LIMIT ${limit}`;
    const taken = countWithin(sizes, maxChars);
    if (taken === 0) return { rows: [], cut: false };
    const rows = this
      .#sql<RunRowRecord>`SELECT rr.idx AS idx, rr.key AS key, coalesce(v.status, 'pending') AS status, coalesce(v.data, '{}') AS data, v.error AS error
      FROM run_rows rr LEFT JOIN row_versions v ON v.key = rr.key AND v.version = rr.version
      WHERE rr.run_id = ${request.runId} AND rr.idx >= ${request.fromIndex} AND rr.idx <= ${sizes[taken - 1]!.idx}
      ORDER BY rr.idx LIMIT ${taken}`.map(rowToSheetRow);
    return { rows, cut: taken < sizes.length };
  }

  /**
   * The fields of the run's rows from `fromIndex` on, over at most `limit` of
   * them and `maxChars` of their data (at least one row): each with the first
   * row that has it and its place in that row (json_each walks a row's JSON in
   * the order it was written; with `min()`, SQLite takes the bare `j.id` from
   * the row of the smallest index). At most one more than MAX_RUN_COLUMNS,
   * the first seen; `nextIndex` is the next row's (null: none is left).
   */
  runColumns(request: RunColumnsRequest): RunColumnsScan {
    const limit = Math.min(request.limit ?? MAX_COLUMN_SCAN_ROWS, MAX_COLUMN_SCAN_ROWS);
    const maxChars = Math.min(request.maxChars ?? MAX_READ_CHARS, MAX_READ_CHARS);
    // Sizes first (one row past the window: where the next one starts), so that json_each parses a bounded window.
    const sizes = this.#sql<{ idx: number; chars: number }>`SELECT rr.idx AS idx, coalesce(length(v.data), 0) AS chars
      FROM run_rows rr LEFT JOIN row_versions v ON v.key = rr.key AND v.version = rr.version
      WHERE rr.run_id = ${request.runId} AND rr.idx >= ${request.fromIndex} ORDER BY rr.idx LIMIT ${limit + 1}`;
    const taken = countWithin(sizes, maxChars, limit);
    if (taken === 0) return { columns: [], nextIndex: null };
    const columns = this.#sql<{ name: string; idx: number; position: number }>`SELECT j.key AS name, min(rr.idx) AS idx, j.id AS position
      FROM run_rows rr JOIN row_versions v ON v.key = rr.key AND v.version = rr.version, json_each(v.data) j
      WHERE rr.run_id = ${request.runId} AND rr.idx >= ${request.fromIndex} AND rr.idx <= ${sizes[taken - 1]!.idx}
      GROUP BY j.key ORDER BY idx, position LIMIT ${MAX_RUN_COLUMNS + 1}`;
    return {
      columns: columns.map((c) => ({ name: c.name, index: c.idx, position: c.position })),
      nextIndex: taken < sizes.length ? sizes[taken]!.idx : null,
    };
  }

  /** Counts the run's membership by the status of the versions its view holds. */
  countRunRows(runId: string): RunRowCounts {
    const row = this.#sql<{ total: number; completed: number; failed: number }>`SELECT count(*) AS total,
      coalesce(sum(v.status = 'completed'), 0) AS completed, coalesce(sum(v.status = 'failed'), 0) AS failed
      FROM run_rows rr LEFT JOIN row_versions v ON v.key = rr.key AND v.version = rr.version WHERE rr.run_id = ${runId}`[0]!;
    return { ...row, pending: row.total - row.completed - row.failed };
  }

  /** The run's membership counted per chunk of `chunkRows` input indexes (chunks with no row here are absent). */
  countRunChunks(request: CountRunChunksRequest): RunChunkCounts[] {
    // A bound JS number may arrive as REAL: cast, so that the division is an integer one.
    return this.#sql<RunChunkCounts>`SELECT rr.idx / CAST(${request.chunkRows} AS INTEGER) AS chunk, count(*) AS total,
      coalesce(sum(v.status = 'completed'), 0) AS completed, coalesce(sum(v.status = 'failed'), 0) AS failed
      FROM run_rows rr LEFT JOIN row_versions v ON v.key = rr.key AND v.version = rr.version WHERE rr.run_id = ${request.runId}
      GROUP BY chunk ORDER BY chunk`;
  }

  /** Frees leases expired at now (status unchanged), returning how many. Idempotent. */
  expireLeases(): number {
    return this.#sql`UPDATE row_heads SET lease_attempt_id = NULL, lease_run_id = NULL, lease_seq = NULL, lease_expires_at = NULL
      WHERE lease_expires_at <= ${this.#now()} RETURNING 1 AS expired`.length;
  }

  /** The earliest lease expiry (epoch ms), or null when no lease is held: when the alarm should fire. */
  nextLeaseExpiry(): number | null {
    const row = this.#sql<{
      next: number | null;
    }>`SELECT min(lease_expires_at) AS next FROM row_heads WHERE lease_expires_at IS NOT NULL`[0];
    return row?.next ?? null;
  }

  /** Of `rows`, those whose version in the run's view is completed or failed (of the same key and input), by index. */
  #settled(runId: string, rows: readonly { index: number; key: string; digest: string }[]): Map<number, Settled> {
    const found = new Map<number, Settled>();
    for (const batch of batches(
      rows.map(({ index, key, digest }) => ({ index, key, digest })),
      (row) => row.key.length + row.digest.length,
    )) {
      // CROSS JOIN keeps the claimed rows the outer loop: left to choose, SQLite walked every row of the run in the
      // shard (its key's prefix) and scanned the batch for each settled one, a claim costing the run's size.
      for (const row of this.#sql<{ idx: number; own: number } & Omit<Settled, "own">>`SELECT r.idx AS idx, v.status AS status,
          v.error AS error, v.written_by_run IS ${runId} AS own
          FROM json_each(${JSON.stringify(batch)}) j
          CROSS JOIN run_rows r ON r.run_id = ${runId} AND r.idx = j.value ->> 'index' AND r.key = j.value ->> 'key'
          JOIN row_versions v ON v.key = r.key AND v.version = r.version
          WHERE v.status IN ('completed', 'failed') AND v.input_digest = j.value ->> 'digest'`) {
        found.set(row.idx, { status: row.status, error: row.error, own: row.own === 1 });
      }
    }
    return found;
  }

  /**
   * The version of the row a claim for this input reuses (see the module comment): the latest; else, for another
   * input than the latest's, the newest computed from this one, when it completed. Null: none.
   */
  #reusableVersion(record: RowRecord, digest: string, attempt: AttemptRef, recompute: boolean): number | null {
    if (reusable(record, digest, attempt, recompute)) return record.version;
    if (record.input_digest === digest) return null;
    const newest = this.#sql<{ version: number; status: string; written_by_run: string | null }>`SELECT version, status,
      written_by_run FROM row_versions WHERE key = ${record.key} AND input_digest = ${digest} ORDER BY version DESC LIMIT 1`[0];
    return newest?.status === "completed" && servesUnderRecompute(newest.written_by_run, attempt, recompute) ? newest.version : null;
  }

  #load(keys: readonly string[]): Map<string, RowRecord> {
    const found = new Map<string, RowRecord>();
    for (const batch of batches([...new Set(keys)], (key) => key.length)) {
      for (const row of this
        .#sql<RowRecord>`SELECT h.key AS key, h.version AS version, v.status AS status, v.input_digest AS input_digest, v.created_by_run AS created_by_run, v.written_by_attempt AS written_by_attempt,
          v.written_by_run AS written_by_run, h.lease_attempt_id AS lease_attempt_id, h.lease_run_id AS lease_run_id,
          h.lease_seq AS lease_seq, h.lease_expires_at AS lease_expires_at
          FROM row_heads h JOIN row_versions v ON v.key = h.key AND v.version = h.version
          WHERE h.key IN (SELECT value FROM json_each(${JSON.stringify(batch)}))`) {
        found.set(row.key, row);
      }
    }
    return found;
  }
}

/** A digest of a row's input, independent of the order of its keys. */
export function inputDigest(input: unknown): string {
  return createHash("sha256").update(canonicalJson(input)).digest("hex");
}

/** How many of `sizes`, in order, fit in `maxChars` (at least one, whatever its size), and at most `limit`. */
function countWithin(sizes: readonly { chars: number }[], maxChars: number, limit = sizes.length): number {
  let taken = 0;
  let chars = 0;
  while (taken < Math.min(limit, sizes.length) && (taken === 0 || chars + sizes[taken]!.chars <= maxChars)) chars += sizes[taken++]!.chars;
  return taken;
}

function rowToSheetRow(row: RunRowRecord): SheetRow {
  return { index: row.idx, key: row.key, status: RowStatus.parse(row.status), data: RowData.parse(JSON.parse(row.data)), error: row.error };
}

/** JSON text of a row's data; throws ValidationError unless it is an object within MAX_ROW_DATA_BYTES. */
function serializeRowData(key: string, data: unknown): string {
  if (typeof data !== "object" || data === null || Array.isArray(data)) {
    throw new ValidationError(`row ${JSON.stringify(key)}: data must be a JSON object`);
  }
  const deep = tooDeepAt(data);
  if (deep !== null)
    throw new ValidationError(`row ${JSON.stringify(key)}: data nests past ${MAX_JSON_DEPTH} levels at ${deep.join(".").slice(0, 200)}`);
  const text = JSON.stringify(data);
  if (utf8BytesPast(text, MAX_ROW_DATA_BYTES) !== null) {
    throw new ValidationError(`row ${JSON.stringify(key)}: data is over ${MAX_ROW_DATA_BYTES} bytes`);
  }
  return text;
}
