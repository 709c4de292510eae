/** An org's run index: upserted by each run's coordinator, paged newest first. */
import { z } from "zod";
import type { Sql } from "./sql";
import { dailyHoldsExpiryMigration, dailyHoldsMigration, orgSpendMigration } from "./org-spend-store";
import { uploadSweepMigration } from "./upload-sweep-store";

export const directoryMigrations = [
  `CREATE TABLE runs (
     run_id TEXT PRIMARY KEY, play TEXT NOT NULL, status TEXT NOT NULL, parent_run_id TEXT,
     created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
   CREATE INDEX runs_newest ON runs (created_at DESC, run_id DESC);`,
  `CREATE TABLE idempotency_keys (
     key TEXT PRIMARY KEY, run_id TEXT NOT NULL, fingerprint TEXT NOT NULL, created_at INTEGER NOT NULL);`,
  orgSpendMigration,
  `CREATE TABLE executor_leases (run_id TEXT PRIMARY KEY, executors INTEGER NOT NULL, expires_at INTEGER NOT NULL);`,
  // Keys expire (IDEMPOTENCY_KEY_TTL_MS): the oldest go first.
  `CREATE INDEX idempotency_keys_age ON idempotency_keys (created_at);`,
  dailyHoldsMigration,
  dailyHoldsExpiryMigration,
  // What each lease's holder asked for: the bound is shared by what the holders want (leaseExecutors).
  `ALTER TABLE executor_leases ADD COLUMN wanted INTEGER NOT NULL DEFAULT 0;`,
  `ALTER TABLE executor_leases ADD COLUMN busy INTEGER NOT NULL DEFAULT 0;`,
  uploadSweepMigration,
];

/** How long an `Idempotency-Key` stands for its run: a submit with it after this starts a new one. */
export const IDEMPOTENCY_KEY_TTL_MS = 7 * 24 * 3600_000;
/** Expired keys removed with each claim, at most: the table does not grow for ever, and no claim does much work. */
const EXPIRED_KEYS_PER_CLAIM = 100;

/** A run's map asks for executors under its org's bound (see `DirectoryStore.leaseExecutors`). */
export const ExecutorLeaseRequest = z.object({
  runId: z.string().min(1).max(100),
  /** The run's map asking: each map of a run (two at once, `Promise.all`) holds a lease of its own. */
  map: z.string().min(1).max(64).optional(),
  /** 0 gives the run's lease back. */
  wanted: z.number().int().min(0).max(1000),
  /**
   * Executors the map has busy now: a map trimmed to its share keeps them until their attempts end, and until then
   * they count against the others' leases (absent: none).
   */
  busy: z.number().int().min(0).max(1000).optional(),
  /** The org's bound, from the asking run's policy. */
  limit: z.number().int().min(1).max(100_000),
  ttlMs: z.number().int().min(1000).max(3_600_000),
});
export type ExecutorLeaseRequest = z.infer<typeof ExecutorLeaseRequest>;

export const RunEntry = z.object({
  runId: z.string().min(1).max(100),
  play: z.string().min(1).max(64),
  status: z.string().min(1).max(20),
  parentRunId: z.string().max(100).nullable(),
  createdAt: z.number().int(),
  updatedAt: z.number().int(),
});
export type RunEntry = z.infer<typeof RunEntry>;

/** A submit carrying an `Idempotency-Key`: the run it would start, and what it asks for. */
export const IdempotentSubmit = z.object({
  key: z.string().min(1).max(200),
  /** A digest of the request (play, input, flags): the same key with another request is a conflict. */
  fingerprint: z.string().min(1).max(200),
  /** The run id this submit would create if the key is new. */
  runId: z.string().min(1).max(100),
  now: z.number().int(),
});
export type IdempotentSubmit = z.infer<typeof IdempotentSubmit>;

/** A key to free, as long as it still stands for `runId` (see {@link DirectoryStore.releaseKey}). */
export const KeyRelease = IdempotentSubmit.pick({ key: true, runId: true });
export type KeyRelease = z.infer<typeof KeyRelease>;

/** The run a key stands for: `created` only for the submit that recorded it. */
export interface IdempotentRun {
  runId: string;
  fingerprint: string;
  created: boolean;
}

export interface ListRunsRequest {
  limit: number;
  /** Opaque: from the previous page's `nextCursor`. */
  cursor: string | null;
}

type EntryRow = { run_id: string; play: string; status: string; parent_run_id: string | null; created_at: number; updated_at: number };

function rowToEntry(r: EntryRow): RunEntry {
  return {
    runId: r.run_id,
    play: r.play,
    status: r.status,
    parentRunId: r.parent_run_id,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

export class DirectoryStore {
  #sql: Sql;

  constructor(options: { sql: Sql }) {
    this.#sql = options.sql;
  }

  /**
   * Leases executors to a run until `now + ttlMs` (renewed by asking again):
   * what it wants, up to its fair share of `limit` among the org's live
   * leases ({@link fairShares}: what the holders that want less leave goes to
   * those that want more), as far as the others' leases leave now, and always
   * at least one, so that no running map stands still. A holder past its
   * share (it came first) is trimmed to it when it renews, every few seconds,
   * and the newcomer grows to its own as the executors the other no longer
   * holds finish their attempts (until then they count as the other's): a run
   * started while others fill the bound gets its share within a chunk's
   * time, not when they end.
   */
  leaseExecutors(request: ExecutorLeaseRequest, now: number): number {
    // The lease's holder (the table's run_id column): a run's map, or a run.
    const holder = request.map === undefined ? request.runId : `${request.runId}/${request.map}`;
    this.#sql.write`DELETE FROM executor_leases WHERE expires_at <= ${now}`;
    if (request.wanted === 0) {
      this.#sql.write`DELETE FROM executor_leases WHERE run_id = ${holder}`;
      return 0;
    }
    // A lease stored before `wanted` was kept wants what it holds; one trimmed below what it still runs holds that.
    const others = this.#sql<{ executors: number; wanted: number; busy: number }>`SELECT executors, wanted, busy
      FROM executor_leases WHERE run_id != ${holder}`;
    const held = others.reduce((sum, other) => sum + Math.max(other.executors, other.busy), 0);
    const [share] = fairShares(request.limit, [request.wanted, ...others.map((other) => other.wanted || other.executors)]);
    const granted = Math.max(1, Math.min(share!, request.limit - held));
    const busy = request.busy ?? 0;
    this.#sql.write`INSERT INTO executor_leases (run_id, executors, wanted, busy, expires_at)
      VALUES (${holder}, ${granted}, ${request.wanted}, ${busy}, ${now + request.ttlMs})
      ON CONFLICT (run_id) DO UPDATE SET executors = excluded.executors, wanted = excluded.wanted, busy = excluded.busy,
        expires_at = excluded.expires_at`;
    return granted;
  }

  record(entry: RunEntry): void {
    this.#sql.write`INSERT INTO runs (run_id, play, status, parent_run_id, created_at, updated_at)
      VALUES (${entry.runId}, ${entry.play}, ${entry.status}, ${entry.parentRunId}, ${entry.createdAt}, ${entry.updatedAt})
      ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at
      WHERE excluded.updated_at >= runs.updated_at`;
  }

  /**
   * Records `key` → `runId` unless the key is already taken, in one statement:
   * of any number of concurrent submits with one key, exactly one is `created`
   * and every other gets that one's run. A key older than
   * {@link IDEMPOTENCY_KEY_TTL_MS} has expired: it is taken anew. Null when
   * the key is new and `create` is false (nothing is recorded).
   */
  claimKey(submit: IdempotentSubmit, create = true): IdempotentRun | null {
    const expired = submit.now - IDEMPOTENCY_KEY_TTL_MS;
    this.#sql.write`DELETE FROM idempotency_keys WHERE key = ${submit.key} AND created_at <= ${expired}`;
    this.#sql.write`DELETE FROM idempotency_keys WHERE key IN
      (SELECT key FROM idempotency_keys WHERE created_at <= ${expired} ORDER BY created_at LIMIT ${EXPIRED_KEYS_PER_CLAIM})`;
    if (!create && this.#sql`SELECT 1 FROM idempotency_keys WHERE key = ${submit.key}`.length === 0) return null;
    const created = this.#sql.write`INSERT INTO idempotency_keys (key, run_id, fingerprint, created_at)
      VALUES (${submit.key}, ${submit.runId}, ${submit.fingerprint}, ${submit.now}) ON CONFLICT (key) DO NOTHING`;
    const row = this.#sql<{
      run_id: string;
      fingerprint: string;
    }>`SELECT run_id, fingerprint FROM idempotency_keys WHERE key = ${submit.key}`[0]!;
    return { runId: row.run_id, fingerprint: row.fingerprint, created: created > 0 };
  }

  /**
   * Frees `key` if it still stands for `runId`: the submit that claimed it could not hand that run its input at all
   * (too large once parsed), so no run holds the key and a retry with smaller rows may take it. True when it did.
   */
  releaseKey(release: KeyRelease): boolean {
    return this.#sql.write`DELETE FROM idempotency_keys WHERE key = ${release.key} AND run_id = ${release.runId}` > 0;
  }

  list({ limit, cursor }: ListRunsRequest): { runs: RunEntry[]; nextCursor: string | null } {
    const after = decodeCursor(cursor);
    const rows = after
      ? this.#sql<EntryRow>`SELECT * FROM runs WHERE (created_at, run_id) < (${after.createdAt}, ${after.runId})
          ORDER BY created_at DESC, run_id DESC LIMIT ${limit + 1}`
      : this.#sql<EntryRow>`SELECT * FROM runs ORDER BY created_at DESC, run_id DESC LIMIT ${limit + 1}`;
    const page = rows.slice(0, limit).map(rowToEntry);
    const last = page[page.length - 1];
    return { runs: page, nextCursor: rows.length > limit && last ? encodeCursor(last) : null };
  }
}

function encodeCursor(entry: RunEntry): string {
  return btoa(`${entry.createdAt}:${entry.runId}`);
}

function decodeCursor(cursor: string | null): { createdAt: number; runId: string } | null {
  if (!cursor) return null;
  const position = parseRunCursor(cursor);
  // The HTTP API refuses a cursor it did not give out; here one is read as "from the start".
  return position ?? null;
}

/** The position a cursor of `list` names, or undefined when it is not one `list` gave out. */
export function parseRunCursor(cursor: string): { createdAt: number; runId: string } | undefined {
  let text: string;
  try {
    text = atob(cursor);
  } catch {
    return undefined; // not base64
  }
  const [createdAt, runId] = text.split(/:(.*)/s);
  if (!createdAt || !runId || !/^\d+$/.test(createdAt) || !/^run_[0-9a-f]{32}$/.test(runId)) return undefined;
  return { createdAt: Number(createdAt), runId };
}

/**
 * Max-min fair shares of `limit` among `wants`: each gets at most what it
 * wants, and what those wanting less leave is shared by the others (in the
 * order given: `shares[i]` is `wants[i]`'s).
 *
 * @example
 * fairShares(8, [8, 8]); // [4, 4]
 * fairShares(8, [8, 2]); // [6, 2]
 */
export function fairShares(limit: number, wants: readonly number[]): number[] {
  const order = wants.map((want, index) => ({ want, index })).sort((a, b) => a.want - b.want);
  const shares = new Array<number>(wants.length).fill(0);
  let left = limit;
  order.forEach(({ want, index }, k) => {
    const share = Math.min(want, Math.ceil(left / (order.length - k)));
    shares[index] = share;
    left -= share;
  });
  return shares;
}
