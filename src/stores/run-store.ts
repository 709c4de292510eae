/**
 * The run's durable state in its coordinator: the run record, its input, the
 * chunk plan with each chunk's state and attempt, progress, and the event
 * ledger. Plain logic over the Sql helper; the actor only adapts it.
 */
import { LedgerStore } from "./ledger-store";
import { ReportsStore } from "./reports-store";
import type { MapProgress } from "../api/responses";
import type { ChunkResume } from "../contracts/executors";
import type { RunStatus } from "../core/statuses";
import type { Sql } from "./sql";
import { textParts } from "../core/utf8";
import { SalvageStore } from "./salvage-store";
import { SpendStore, toMicros } from "./spend-store";
import {
  type ChunkCounts,
  type ChunkRecord,
  type ChunkState,
  type MapRecord,
  type RunEnding,
  type RunError,
  type RunRecord,
  type RunRow,
  rowToRun,
} from "./run-records";

export type { ChunkCounts, ChunkRecord, ChunkState, MapRecord, RunEnding, RunError, RunRecord } from "./run-records";

const INPUT_PART_CHARS = 512 * 1024;
/** Names of the run's object RPC counters by kind in its `counters` table. */
const RPC_COUNTER_PREFIX = "object_rpcs:";

export class RunStore {
  #sql: Sql;
  #now: () => number;
  /** Billed outputs whose receipts could not be completed. */
  readonly salvage: SalvageStore;
  /** The run's billable requests: reserved, then billed. */
  readonly spend: SpendStore;
  /** The run's events, as its API and live watchers read them. */
  readonly ledger: LedgerStore;
  /** The executors' reports applied, by reporter. */
  readonly reports: ReportsStore;

  constructor(options: { sql: Sql; now: () => number }) {
    this.#sql = options.sql;
    this.#now = options.now;
    this.salvage = new SalvageStore({ sql: options.sql });
    this.spend = new SpendStore({ sql: options.sql, now: options.now });
    this.ledger = new LedgerStore({ sql: options.sql, now: options.now });
    this.reports = new ReportsStore({ sql: options.sql, now: options.now });
  }

  run(): RunRecord | null {
    const row = this.#sql<RunRow>`SELECT * FROM run WHERE id = 1`[0];
    return row ? rowToRun(row) : null;
  }

  /** Records a new run and its input; a no-op if the run exists (idempotent start). */
  create(
    init: {
      runId: string;
      org: string;
      play: string;
      parentRunId: string | null;
      depth?: number;
      force: boolean;
      forceToolRefresh: boolean;
      deadlineAt: number;
      testPolicy?: Record<string, number> | null;
      maxSpend?: number | null;
      retryUnknown?: boolean;
    },
    input: unknown,
  ): boolean {
    if (this.run()) return false;
    const now = this.#now();
    const testPolicy = init.testPolicy ? JSON.stringify(init.testPolicy) : null;
    const maxSpend = init.maxSpend === undefined || init.maxSpend === null ? null : toMicros(init.maxSpend);
    this.#sql
      .write`INSERT INTO run (id, run_id, org, play, parent_run_id, depth, status, force, force_tool_refresh, deadline_at, test_policy, max_spend_micros, retry_unknown, created_at, updated_at)
      VALUES (1, ${init.runId}, ${init.org}, ${init.play}, ${init.parentRunId}, ${init.depth ?? 0}, 'queued', ${init.force ? 1 : 0}, ${init.forceToolRefresh ? 1 : 0}, ${init.deadlineAt}, ${testPolicy}, ${maxSpend}, ${init.retryUnknown ? 1 : 0}, ${now}, ${now})`;
    const text = JSON.stringify(input);
    for (const [part, chars] of textParts(text, INPUT_PART_CHARS).entries())
      this.#sql.write`INSERT INTO input_parts (part, text) VALUES (${part}, ${chars})`;
    return true;
  }

  input(): unknown {
    return JSON.parse(this.inputJson());
  }

  /** The run's input as stored: JSON text. */
  inputJson(): string {
    return this.#sql<{ text: string }>`SELECT text FROM input_parts ORDER BY part`.map((p) => p.text).join("");
  }

  setStatus(status: RunStatus, outcome: { result?: unknown; error?: RunError | null } = {}): void {
    const result = outcome.result === undefined ? null : JSON.stringify(outcome.result);
    const error = outcome.error ? JSON.stringify(outcome.error) : null;
    this.#sql
      .write`UPDATE run SET status = ${status}, result = coalesce(${result}, result), error = coalesce(${error}, error), updated_at = ${this.#now()} WHERE id = 1`;
  }

  requestCancel(): void {
    this.#sql.write`UPDATE run SET cancel_requested = 1, updated_at = ${this.#now()} WHERE id = 1`;
  }

  /** Starts a new attempt epoch: every chunk attempt of an older epoch is fenced off. */
  bumpAttempt(): number {
    this.#sql.write`UPDATE run SET run_attempt = run_attempt + 1, updated_at = ${this.#now()} WHERE id = 1`;
    return this.run()!.runAttempt;
  }

  addUsage(usage: {
    rpc: number;
    provider: number;
    retries?: number;
    rateLimited?: number;
    lookups?: number;
    outcomeUnknown?: number;
    /** `rpc` broken down by kind (`sheet.claimRows`, ...), as the meter counts it. */
    rpcByKind?: Readonly<Record<string, number>>;
  }): void {
    this.#sql.write`UPDATE run SET object_rpcs = object_rpcs + ${usage.rpc}, provider_requests = provider_requests + ${usage.provider},
      provider_retries = provider_retries + ${usage.retries ?? 0}, rate_limited = rate_limited + ${usage.rateLimited ?? 0},
      provider_lookups = provider_lookups + ${usage.lookups ?? 0}, outcome_unknown = outcome_unknown + ${usage.outcomeUnknown ?? 0} WHERE id = 1`;
    // The breakdown is kept in the run's `counters` table (names prefixed, apart from the journal's replay counters), not in a column.
    if (usage.rpcByKind && Object.keys(usage.rpcByKind).length > 0) {
      this.#sql.write`INSERT INTO counters (name, value)
        SELECT ${RPC_COUNTER_PREFIX} || key, value FROM json_each(${JSON.stringify(usage.rpcByKind)}) WHERE true
        ON CONFLICT (name) DO UPDATE SET value = value + excluded.value`;
    }
  }

  /**
   * The run's object RPCs by kind, over all invocations (`usage.objectRpcsByKind`); RPCs added to the usage
   * without a breakdown are `other`, so that the kinds always add up to `usage.objectRpcs`.
   */
  objectRpcsByKind(): Record<string, number> {
    const rows = this.#sql<{ name: string; value: number }>`SELECT name, value FROM counters
      WHERE substr(name, 1, ${RPC_COUNTER_PREFIX.length}) = ${RPC_COUNTER_PREFIX} ORDER BY value DESC, name`;
    const byKind: Record<string, number> = Object.fromEntries(rows.map((r) => [r.name.slice(RPC_COUNTER_PREFIX.length), r.value]));
    const other = (this.run()?.usage.objectRpcs ?? 0) - rows.reduce((sum, r) => sum + r.value, 0);
    if (other > 0) byKind.other = (byKind.other ?? 0) + other;
    return byKind;
  }

  /**
   * The end the run decided and is carrying out (run-end.ts), or null: an invocation that dies mid-way leaves it.
   * Kept in a row of its own (a completed end holds the result, which the run's row holds too once it has ended).
   */
  ending(): RunEnding | null {
    const text = this.#sql<{ ending: string }>`SELECT ending FROM run_ending WHERE id = 1`[0]?.ending ?? null;
    return text === null ? null : (JSON.parse(text) as RunEnding);
  }

  setEnding(end: RunEnding | null): void {
    if (end === null) this.#sql.write`DELETE FROM run_ending WHERE id = 1`;
    else
      this.#sql.write`INSERT INTO run_ending (id, ending) VALUES (1, ${JSON.stringify(end)})
      ON CONFLICT (id) DO UPDATE SET ending = excluded.ending`;
  }

  noteInfraFailure(reset: boolean): number {
    if (reset) this.#sql.write`UPDATE run SET infra_failures = 0 WHERE id = 1`;
    else this.#sql.write`UPDATE run SET infra_failures = infra_failures + 1 WHERE id = 1`;
    return this.run()!.infraFailures;
  }

  // ---- maps and chunks

  map(name: string): MapRecord | null {
    const r = this.#sql<{
      name: string;
      shard_count: number;
      total: number;
      duplicates_dropped: number;
      chunk_rows: number;
      chunk_count: number;
      done: number;
      repairs: number;
    }>`
      SELECT * FROM maps WHERE name = ${name}`[0];
    if (!r) return null;
    return {
      name: r.name,
      shardCount: r.shard_count,
      total: r.total,
      duplicatesDropped: r.duplicates_dropped,
      chunkRows: r.chunk_rows,
      chunkCount: r.chunk_count,
      done: r.done === 1,
      repairs: r.repairs,
    };
  }

  /** The maps that have ended, in the order they were created. */
  doneMaps(): MapRecord[] {
    return this.#sql<{ name: string }>`SELECT name FROM maps WHERE done = 1 ORDER BY ordinal`.map((r) => this.map(r.name)!);
  }

  /** Records a map's chunk plan once; a replay finds it and continues. */
  createMap(map: Omit<MapRecord, "done" | "chunkCount" | "repairs">): MapRecord {
    const chunkCount = Math.ceil(map.total / map.chunkRows);
    const ordinal = this.#sql<{ n: number }>`SELECT count(*) AS n FROM maps`[0]!.n;
    this.#sql.write`INSERT INTO maps (name, ordinal, shard_count, total, duplicates_dropped, chunk_rows, chunk_count)
      VALUES (${map.name}, ${ordinal}, ${map.shardCount}, ${map.total}, ${map.duplicatesDropped}, ${map.chunkRows}, ${chunkCount})`;
    this.#sql.write`INSERT INTO chunks (map, idx, rows)
      WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < ${chunkCount})
      SELECT ${map.name}, i, min(${map.chunkRows}, ${map.total} - i * ${map.chunkRows}) FROM seq WHERE ${chunkCount} > 0`;
    return this.map(map.name)!;
  }

  chunks(map: string): ChunkRecord[] {
    return this.#sql<{
      idx: number;
      rows: number;
      state: string;
      attempt_seq: number;
      retries: number;
      completed: number;
      failed: number;
      redispatches: number;
      resume: string | null;
    }>`
      SELECT idx, rows, state, attempt_seq, retries, completed, failed, redispatches, resume FROM chunks WHERE map = ${map} ORDER BY idx`.map(
      (c) => ({
        resume: c.resume === null ? null : (JSON.parse(c.resume) as ChunkResume),
        idx: c.idx,
        rows: c.rows,
        state: c.state as ChunkState,
        attemptSeq: c.attempt_seq,
        retries: c.retries,
        completed: c.completed,
        failed: c.failed,
        redispatches: c.redispatches,
      }),
    );
  }

  /** Chunks whose attempt was in flight when the previous invocation ended. */
  runningChunks(): number {
    return this.#sql<{ n: number }>`SELECT count(*) AS n FROM chunks WHERE state = 'running'`[0]!.n;
  }

  startChunk(map: string, idx: number, attemptSeq: number): void {
    this.#sql.write`UPDATE chunks SET state = 'running', attempt_seq = ${attemptSeq} WHERE map = ${map} AND idx = ${idx}`;
  }

  /** Records an attempt's outcome; `done` false sends the chunk back to pending (retried later). */
  finishChunk(
    map: string,
    idx: number,
    outcome: {
      done: boolean;
      completed: number;
      failed: number;
      reused: number;
      blocked: { ownerRunId: string; leaseExpiresAt: number }[];
      failureSamples: { key: string; error: string }[];
    },
  ): void {
    const state: ChunkState = outcome.done ? "done" : "pending";
    const retry = outcome.done ? 0 : 1;
    const by = outcome.blocked[0]?.ownerRunId ?? null;
    const until = outcome.blocked.length ? Math.max(...outcome.blocked.map((b) => b.leaseExpiresAt)) : null;
    this.#sql
      .write`UPDATE chunks SET state = ${state}, completed = ${outcome.completed}, failed = ${outcome.failed}, reused = ${outcome.reused},
      blocked = ${outcome.blocked.length}, blocked_by = ${by}, blocked_until = ${until}, retries = retries + ${retry}, resume = NULL,
      told = ${outcome.done ? 0 : 1} WHERE map = ${map} AND idx = ${idx}`;
    for (const sample of outcome.failureSamples) {
      this.#sql.write`INSERT OR IGNORE INTO failure_samples (map, key, error) SELECT ${map}, ${sample.key}, ${sample.error}
        WHERE (SELECT count(*) FROM failure_samples WHERE map = ${map}) < 20`;
    }
  }

  /** Chunks of `map` done and not yet told to watchers (`chunks.completed`), by index, at most `limit`. */
  untoldChunks(map: string, limit: number): { chunk: number; completed: number; failed: number; reused: number; attemptSeq: number }[] {
    return this.#sql<{ chunk: number; completed: number; failed: number; reused: number; attemptSeq: number }>`
      SELECT idx AS chunk, completed, failed, reused, attempt_seq AS attemptSeq FROM chunks
      WHERE map = ${map} AND told = 0 ORDER BY idx LIMIT ${limit}`;
  }

  /** The done chunks of `map` up to index `upTo` are told. */
  markChunksTold(map: string, upTo: number): void {
    this.#sql.write`UPDATE chunks SET told = 1 WHERE map = ${map} AND told = 0 AND idx <= ${upTo}`;
  }

  /**
   * The chunk's attempt wound down: it goes back to pending without a retry counted, its counts so far stored (the
   * progress shows them), and its next attempt runs only the rows `resume` left.
   */
  deferChunk(map: string, idx: number, resume: ChunkResume): void {
    const { done } = resume;
    // Blocked rows' keys only name them in messages: kept short, the record stays small.
    const stored: ChunkResume = { ...resume, done: { ...done, blocked: done.blocked.map((b) => ({ ...b, key: b.key.slice(0, 64) })) } };
    this.#sql.write`UPDATE chunks SET state = 'pending', resume = ${JSON.stringify(stored)}, completed = ${done.completed},
      failed = ${done.failed}, reused = ${done.reused}, blocked = ${done.blocked.length} WHERE map = ${map} AND idx = ${idx}`;
  }

  /** Any chunk still marked running (by a dead invocation) goes back to pending. */
  resetRunningChunks(): void {
    this.#sql.write`UPDATE chunks SET state = 'pending' WHERE state = 'running'`;
  }

  /**
   * Puts the chunks still running back to pending under a new attempt epoch
   * (every attempt of the older one is fenced off): the new epoch, or null
   * when none was running.
   */
  redispatchRunning(): number | null {
    if (this.runningChunks() === 0) return null;
    this.resetRunningChunks();
    return this.bumpAttempt();
  }

  /**
   * The chunk's attempt died (lost its leases, threw): it stays `running`, so
   * the next invocation fences it off under a new epoch and redispatches it.
   * @returns how many times the chunk has been redispatched so far.
   */
  noteRedispatch(map: string, idx: number): number {
    this.#sql.write`UPDATE chunks SET redispatches = redispatches + 1 WHERE map = ${map} AND idx = ${idx}`;
    return this.#sql<{ n: number }>`SELECT redispatches AS n FROM chunks WHERE map = ${map} AND idx = ${idx}`[0]?.n ?? 0;
  }

  /** Finalize found rows of these chunks not persisted: they run again. @returns the map's repairs so far. */
  reopenChunks(map: string, idxs: readonly number[]): number {
    this.#sql
      .write`UPDATE chunks SET state = 'pending' WHERE map = ${map} AND idx IN (SELECT value FROM json_each(${JSON.stringify(idxs)}))`;
    this.#sql.write`UPDATE maps SET repairs = repairs + 1 WHERE name = ${map}`;
    return this.map(map)?.repairs ?? 0;
  }

  /** Replaces a chunk's reported counts with what its rows in the sheets say (finalize). */
  setChunkCounts(map: string, idx: number, counts: { completed: number; failed: number }): void {
    this.#sql.write`UPDATE chunks SET completed = ${counts.completed}, failed = ${counts.failed} WHERE map = ${map} AND idx = ${idx}`;
  }

  markMapDone(map: string): void {
    this.#sql.write`UPDATE maps SET done = 1 WHERE name = ${map}`;
  }

  /**
   * The map's stored counts. A running chunk's rows are all `active`: what an
   * earlier attempt of it stored (rows that failed, or a blocked retry's) is
   * left to LiveRows, which counts it until the running attempt's own live
   * counts (reused rows included) reach it; counting both showed a chunk past
   * its rows, then falling back when it ended. A pending chunk's rows an
   * earlier attempt stored (a retry of its blocked rows, a repair) count as
   * they were stored, not as waiting too.
   */
  progress(map: string): MapProgress {
    // The chunks' shares, summed as they change (map_totals: see run-schema.ts); a map with no chunk has no row.
    const r = this.#sql<{ total: number; completed: number; failed: number; active: number; waiting: number; blocked: number }>`
      SELECT m.total AS total, coalesce(t.completed, 0) AS completed, coalesce(t.failed, 0) AS failed,
        coalesce(t.active, 0) AS active, coalesce(t.waiting, 0) AS waiting, coalesce(t.blocked, 0) AS blocked
      FROM maps m LEFT JOIN map_totals t ON t.map = m.name WHERE m.name = ${map}`[0];
    if (!r) return { total: 0, completed: 0, failed: 0, active: 0, waiting: 0, blocked: 0 };
    if (r.blocked === 0) return r;
    const by = this.#sql<{ run_id: string; until: number }>`SELECT blocked_by AS run_id, blocked_until AS until FROM chunks
      WHERE map = ${map} AND state = 'pending' AND blocked > 0 AND blocked_by IS NOT NULL ORDER BY blocked_until DESC LIMIT 1`[0];
    return by ? { ...r, blockedBy: { runId: by.run_id, until: new Date(by.until).toISOString() } } : r;
  }

  /** What earlier attempts of the map's running chunks stored (chunks that stored nothing are left out). */
  runningCounts(map: string): ChunkCounts[] {
    return this.#sql<{ chunk: number; completed: number; failed: number; resumed: number }>`SELECT idx AS chunk, completed, failed,
      resume IS NOT NULL AS resumed FROM chunks
      WHERE map = ${map} AND state = 'running' AND completed + failed > 0`.map((row) => ({ ...row, resumed: row.resumed === 1 }));
  }

  /** Rows this run computed (not reused), over every map. */
  computedRows(): number {
    return this.#sql<{ n: number }>`SELECT coalesce(sum(completed + failed - reused), 0) AS n FROM chunks`[0]!.n;
  }

  allProgress(): Record<string, MapProgress> {
    const out: Record<string, MapProgress> = {};
    for (const { name } of this.#sql<{ name: string }>`SELECT name FROM maps ORDER BY ordinal`) out[name] = this.progress(name);
    return out;
  }

  failureSamples(): { map: string; key: string; error: string }[] {
    return this.#sql<{ map: string; key: string; error: string }>`SELECT map, key, error FROM failure_samples ORDER BY rowid LIMIT 20`;
  }
}
