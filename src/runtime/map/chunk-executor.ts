/**
 * Executes one chunk attempt: claim its rows, compute the pending ones while
 * a heartbeat renews the attempt's leases, and persist them fenced by the
 * attempt. The coordinator only sees this interface, so where the work runs
 * (in its own invocation, or spread over others) can change without touching
 * the map logic.
 */
import { ToolCallError } from "../../play/tool-error";
import type { FieldSet, Row, RowContext } from "../../play/types";
import { messageOf, TerminalError, TroupeError } from "../../core/errors";
import { SpendCapReached } from "../tools/spend";
import { MAX_JSON_DEPTH, tooDeepAt } from "../../core/json-depth";
import type { AttemptRef, PersistRowsRequest } from "../../contracts/shards";
import type { ChunkResume, ChunkSummary } from "../../contracts/executors";

export type { ChunkSummary };
import { AttemptLeases } from "./attempt-leases";
import { WorkerBarrier } from "../../core/bulk-queue";
import { forEachLimited } from "../../core/collections";
import { rowRank, withRank } from "../../core/request-rank";
import { MAX_OUTBOUND_IN_FLIGHT } from "../../core/platform-limits";
import type { FatalLatch } from "../../core/latch";
import type { RuntimePolicy } from "../../core/policy";
import type { PlannedRow, UploadSlice } from "../../contracts/shards";
import type { ReceiptClient, SheetClient } from "../../clients/shards";
import type { ToolScheduler } from "../tools/tool-scheduler";

/** A computed row larger than this fails instead of being stored. */
export const MAX_ROW_RESULT_BYTES = 256 * 1024;

export interface ChunkAttempt {
  map: string;
  chunk: number;
  attempt: AttemptRef;
  /** The chunk's rows; empty when they are still in an upload (`slice`). */
  rows: readonly PlannedRow[];
  /** Where the chunk's rows are when the run's input is an upload: read when the attempt runs. */
  slice?: UploadSlice | null;
  /** What an earlier attempt that wound down left of the chunk: only these rows run, and the summary is the chunk's. */
  resume?: ChunkResume | null;
}

/** What an attempt did before a wind-down and after it, as one summary. */
export function joinedSummary(before: ChunkSummary, after: ChunkSummary): ChunkSummary {
  return {
    completed: before.completed + after.completed,
    failed: before.failed + after.failed,
    reused: before.reused + after.reused,
    blocked: [...before.blocked, ...after.blocked],
    rejected: [...before.rejected, ...after.rejected],
    lost: after.lost,
    failureSamples: [...before.failureSamples, ...after.failureSamples].slice(0, 5),
  };
}

/**
 * Consecutive chunks a rerun probably finds done: their rows are read once
 * and only the reused ones recorded (see {@link sweepReused}).
 */
export interface ChunkSweep {
  map: string;
  /** The coordinator's epoch; the sweep leases nothing under it. */
  attempt: AttemptRef;
  /** The chunks in order, each with its row count: `rows` (or the slice's rows) are theirs one after another. */
  chunks: { chunk: number; rows: number }[];
  rows: readonly PlannedRow[];
  slice: UploadSlice | null;
  /** The map's `key` option when it is a field name; `keyInPlay` when it is a function (an executor takes it from the play). */
  key: string | null;
  keyInPlay: boolean;
}

export interface ChunkExecutor {
  execute(chunk: ChunkAttempt): Promise<AttemptOutcome>;
  /** The chunks of `sweep` whose every row was reused, now recorded in the run's view; the others are left as they were. */
  sweep(sweep: ChunkSweep): Promise<number[]>;
}

/**
 * A rerun's shortcut: one claim per shard for several chunks' rows that
 * records only the reused rows (nothing is leased, nothing computed), then
 * says which chunks had every row reused. Each of those is done as its
 * attempt would have left it; any other chunk is dispatched as usual (its
 * attempt claims the reused rows again, which changes nothing).
 */
export async function sweepReused(
  sheets: SheetClient,
  sweep: Pick<ChunkSweep, "attempt" | "chunks">,
  rows: readonly PlannedRow[],
  recompute: boolean,
): Promise<number[]> {
  const total = sweep.chunks.reduce((sum, chunk) => sum + chunk.rows, 0);
  if (rows.length !== total) throw new Error(`a sweep of ${total} rows was given ${rows.length}`);
  // The lease's length is never used: a sweep leases nothing.
  const claims = await sheets.claimRows({ attempt: sweep.attempt, rows, recompute, leaseTtlMs: 1, reuseOnly: true });
  const reused: number[] = [];
  let at = 0;
  for (const { chunk, rows: count } of sweep.chunks) {
    const own = rows.slice(at, at + count);
    at += count;
    if (own.every((row) => claims.get(row.index)?.status === "completed")) reused.push(chunk);
  }
  return reused;
}

export interface InProcessExecutorOptions {
  sheets: SheetClient;
  /** The org's receipt shards, for the heartbeat's renewals. */
  receipts: ReceiptClient;
  fields: FieldSet;
  policy: RuntimePolicy;
  /** `force`: recompute rows completed by other runs. */
  recompute: boolean;
  latch: FatalLatch;
  /** The run's signal (cancel, suspension). Each attempt adds its own: lease lost. */
  signal: AbortSignal;
  /**
   * Aborted when the invocation's budget runs low (an executor's, MapExecutor):
   * the attempt sends no request more, as on a cancel, and ends with the rows
   * it did not finish {@link WoundDownSummary.deferred} instead of throwing.
   */
  windDown?: AbortSignal;
  /** A tool scheduler for the attempt, whose tool path stops with `leases.signal` and reports receipts to `leases`. */
  scheduler(attempt: AttemptRef, workers: WorkerBarrier, leases: AttemptLeases): ToolScheduler;
  /** Reads a chunk's rows from the run's upload (upload-rows.ts); absent when the map's rows are in hand. */
  readSlice?(slice: UploadSlice): Promise<PlannedRow[]>;
  /** A row of `chunk` started computing, or settled: its fields all returned (completed or failed), or it was stopped. */
  onRow?(chunk: number, event: "started" | "completed" | "failed" | "stopped"): void;
  /** Only {@link DRAIN_ROWS} rows of the attempt or fewer are left to settle or to gather in a batch (said once). */
  onDraining?(): void;
  log(line: string): void;
  /** Secrets out of a failed row's error (a provider's 401 quoting its key): rows are read and exported as stored. */
  redact(text: string): string;
  now(): number;
}

/**
 * An attempt with this many rows left to settle drains: soon it has fewer
 * requests than its executor's connections (a row's calls go one after
 * another; rows waiting in a batch that gathers company make one request
 * between them, so they are not counted). Twice the connections, so that the
 * next attempt, run alongside, has its rows and receipts claimed by the time
 * they idle.
 */
const DRAIN_ROWS = 2 * MAX_OUTBOUND_IN_FLIGHT;

/**
 * A row context's hook for effects added around it (`ctx.fetch`): an effect
 * refused because the attempt stopped calls it, and the row is not stored.
 */
export const REFUSED = Symbol("refused");
export interface Refusable {
  [REFUSED]?: () => void;
}

/** Tells the row `rc` belongs to that one of its effects was refused because its attempt stopped. */
export function refusedIn(rc: RowContext): void {
  (rc as RowContext & Refusable)[REFUSED]?.();
}

/**
 * How a chunk attempt ended, as the map runner records it (AttemptEnd): its summary; `deferred`, the rows a wind-down
 * left (they go on in the run's next invocation); `unstarted` when it had not started; `stalled`, the wind-downs in a
 * row without progress as its executor counted them; `callsSettled`, run here, as {@link WoundDownSummary}'s.
 */
export type AttemptOutcome = ChunkSummary & { deferred?: number[]; unstarted?: boolean; stalled?: number; callsSettled?: number };

/**
 * An attempt's summary; `deferred`: the indexes of rows a wind-down left unfinished (nothing of them was persisted);
 * `callsSettled`: the calls whose outcomes it stored before it wound down (progress, though no row settled).
 */
export interface WoundDownSummary extends ChunkSummary {
  deferred: number[];
  callsSettled?: number;
}

/** Runs chunk attempts inside the calling invocation. */
export class InProcessChunkExecutor implements ChunkExecutor {
  #deps: InProcessExecutorOptions;

  constructor(options: InProcessExecutorOptions) {
    this.#deps = options;
  }

  /**
   * Runs the attempt over its rows, or only those whose index is in `only` (or its `resume`'s rows: a wound-down
   * attempt going on); with a `resume`, the summary is the whole chunk's.
   */
  async execute(attempt: ChunkAttempt, only?: ReadonlySet<number>): Promise<WoundDownSummary> {
    const { resume } = attempt;
    if (!resume || only) return this.#execute(attempt, only);
    const part = await this.#execute(attempt, new Set(resume.rows));
    return { ...joinedSummary(resume.done, part), deferred: part.deferred, callsSettled: part.callsSettled };
  }

  async #execute({ attempt, rows: given, chunk, slice }: ChunkAttempt, only?: ReadonlySet<number>): Promise<WoundDownSummary> {
    const { sheets, policy, latch, windDown } = this.#deps;
    const summary: WoundDownSummary = {
      completed: 0,
      failed: 0,
      reused: 0,
      blocked: [],
      rejected: [],
      lost: null,
      failureSamples: [],
      deferred: [],
    };
    const all = slice ? await this.#read(slice) : given;
    const rows = only ? all.filter((row) => only.has(row.index)) : all;
    // Wound down before it claimed anything: every row goes on in the next invocation.
    if (windDown?.aborted && !this.#deps.signal.aborted) return { ...summary, deferred: rows.map((row) => row.index) };
    const signal = windDown ? AbortSignal.any([this.#deps.signal, windDown]) : this.#deps.signal;
    const claims = await sheets.claimRows({ attempt, rows, recompute: this.#deps.recompute, leaseTtlMs: policy.rowLeaseTtlMs });
    const pending: PlannedRow[] = [];
    let newerSeq: number | null = null;
    for (const row of rows) {
      const claim = claims.get(row.index);
      if (!claim) throw new Error(`claimRows returned no answer for row ${row.key}`);
      if (claim.status === "completed") {
        summary.completed++;
        // Written by this run (an attempt that died after persisting it, or an earlier pass): computed, not reused.
        if (!claim.own) summary.reused++;
        // Counted live as the computed ones are: a chunk computed again shows its attempt's count once it passes the earlier one's.
        this.#deps.onRow?.(chunk, "started");
        this.#deps.onRow?.(chunk, "completed");
      } else if (claim.status === "failed") {
        summary.failed++;
        if (summary.failureSamples.length < 5) summary.failureSamples.push({ key: row.key, error: claim.error ?? "" });
        this.#deps.onRow?.(chunk, "started");
        this.#deps.onRow?.(chunk, "failed");
      } else if (claim.status === "blocked")
        summary.blocked.push({ key: row.key, leaseExpiresAt: claim.leaseExpiresAt, ownerRunId: claim.owner.runId, index: row.index });
      else if (claim.status === "fenced") newerSeq = claim.newerSeq;
      else pending.push(row);
    }
    // A newer epoch of the run has claimed: this attempt is stale, and runs nothing (what other shards leased it lapses).
    if (newerSeq !== null) {
      const reason = `attempt epoch ${attempt.attemptSeq} is over: epoch ${newerSeq} of the run has claimed its rows`;
      return { ...summary, lost: { rows: rows.map((row) => row.key), receipts: [], reason } };
    }

    const leases = new AttemptLeases({
      attempt,
      sheets,
      receipts: this.#deps.receipts,
      policy,
      signal,
      now: this.#deps.now,
      log: this.#deps.log,
    });
    leases.holdRows(pending.map((row) => row.key));
    leases.start();
    let results: PersistRowsRequest["rows"] = [];
    const computed = new Set<number>();
    try {
      const workers = new WorkerBarrier();
      const scheduler = this.#deps.scheduler(attempt, workers, leases);
      results = await this.#computeRows(chunk, pending, scheduler, workers, leases.signal, computed);
      // Calls a row left behind when it settled (its field rejected while they ran) end under the attempt's leases.
      await scheduler.settled();
      if (results.length) await this.#persist(attempt, leases, results, summary);
    } finally {
      await leases.stop();
    }
    const lost = leases.lost;
    if (lost) summary.lost = { ...lost.keys, reason: lost.message };
    // Rows left unpersisted by a cancel or a tripped latch keep their leases until teardown releases them.
    this.#deps.signal.throwIfAborted();
    if (latch.tripped) throw latch.tripped;
    if (windDown?.aborted && !lost) {
      // Wound down: the rows not computed keep this attempt's leases, which its next invocation claims again. So do
      // the calls it left running (a request whose failure was cut short, a takeover whose recovery was): its claim of
      // one is a takeover, which asks the provider how the request ended before sending it again.
      summary.deferred = pending.filter((row) => !computed.has(row.index)).map((row) => row.index);
      summary.callsSettled = leases.callsSettled;
    }
    return summary;
  }

  async sweep(sweep: ChunkSweep): Promise<number[]> {
    const { readSlice, sheets, recompute } = this.#deps;
    let rows = sweep.rows;
    if (sweep.slice) {
      if (!readSlice) throw new Error(`chunks of upload ${sweep.slice.upload} given to an executor that cannot read uploads`);
      rows = await readSlice(sweep.slice);
    }
    return sweepReused(sheets, sweep, rows, recompute);
  }

  /** The slice's rows from the upload; an upload that is gone trips the latch (every attempt would fail the same). */
  async #read(slice: UploadSlice): Promise<readonly PlannedRow[]> {
    const { readSlice, latch } = this.#deps;
    if (!readSlice) throw new Error(`chunk of upload ${slice.upload} given to an executor that cannot read uploads`);
    try {
      return await readSlice(slice);
    } catch (error) {
      if (error instanceof TerminalError) latch.trip(error);
      throw error;
    }
  }

  /** Computes the pending rows, at most `rowConcurrency` at once; rows cut off by `signal` are left out, the others' indexes go to `computed`. */
  async #computeRows(
    chunk: number,
    pending: PlannedRow[],
    scheduler: ToolScheduler,
    workers: WorkerBarrier,
    signal: AbortSignal,
    computed: Set<number>,
  ): Promise<PersistRowsRequest["rows"]> {
    const results: PersistRowsRequest["rows"] = [];
    let left = pending.length;
    let drained = false;
    const drain = () => {
      if (drained || left === 0 || left - workers.gathered > DRAIN_ROWS) return;
      drained = true;
      this.#deps.onDraining?.();
    };
    workers.onGathered(drain);
    drain();
    await forEachLimited(pending, this.#deps.policy.rowConcurrency, async (planned, index) => {
      // The attempt stopped (a cancel, lost leases, a wind-down): rows not started are left as they are.
      if (signal.aborted) {
        left--;
        return;
      }
      workers.enter();
      this.#deps.onRow?.(chunk, "started");
      let outcome: PersistRowsRequest["rows"][number] | null = null;
      try {
        // Its requests are paced in row order (after older chunks'): the chunk's rows finish one after another, not all at its end.
        outcome = await withRank(rowRank(chunk, index), () => this.#computeRow(planned, scheduler, signal));
        if (outcome) {
          results.push(outcome);
          computed.add(planned.index);
        }
      } finally {
        workers.leave();
        this.#deps.onRow?.(chunk, outcome?.status ?? "stopped");
        left--;
        drain();
      }
    });
    return results;
  }

  /** Writes the computed rows fenced by the attempt and counts what was written. */
  async #persist(attempt: AttemptRef, leases: AttemptLeases, results: PersistRowsRequest["rows"], summary: ChunkSummary): Promise<void> {
    const { sheets, latch } = this.#deps;
    // Persisting ends these leases: a heartbeat racing the write must not take them for lost.
    leases.releaseRows(results.map((row) => row.key));
    const persisted = await sheets.persistRows(attempt, results).catch((error: unknown) => {
      const fatal = new TroupeError("sheet_store_failed", `could not persist ${results.length} rows: ${messageOf(error)}`);
      latch.trip(fatal);
      throw fatal;
    });
    summary.rejected = persisted.rejected;
    const written = new Set(persisted.written);
    for (const row of results) {
      if (!written.has(row.key)) continue;
      if (row.status === "completed") summary.completed++;
      else {
        summary.failed++;
        if (summary.failureSamples.length < 5) summary.failureSamples.push({ key: row.key, error: row.error ?? "" });
      }
    }
  }

  /** Computes one row's fields in order; `null` when the attempt stopped (cancel, lease lost, latch) before the row ended. */
  async #computeRow(
    planned: PlannedRow,
    scheduler: ToolScheduler,
    signal: AbortSignal,
  ): Promise<PersistRowsRequest["rows"][number] | null> {
    const { latch } = this.#deps;
    if (planned.invalid !== undefined)
      return { key: planned.key, status: "failed", data: planned.input, error: `invalid_row: ${planned.invalid}` };
    const row: Row = { ...planned.input };
    // A call refused because the attempt stopped (a cancel, lost leases, a wind-down), which a field may catch and
    // go on from: the row is not what its fields would compute, and is not stored.
    let refused = false;
    const refuse = () => {
      refused = true;
    };
    const ctx = <RowContext & Refusable>{
      // runPlay and fetch are added by RunContext.map (src/runtime/invocation/play-context.ts)
      rowKey: planned.key,
      signal,
      tool: (toolId, input, options) =>
        (scheduler.call(toolId, input, options) as Promise<any>).catch((error: unknown) => {
          if (signal.aborted) refuse();
          throw error;
        }),
      log: (...args) => this.#deps.log(`[row ${planned.key}] ${args.map(String).join(" ")}`),
      [REFUSED]: refuse,
    };
    try {
      for (const [name, fn] of Object.entries(this.#deps.fields)) {
        const value = await fn(row, ctx);
        row[name] = value === undefined ? null : value;
      }
      if (refused) return null;
      const deep = tooDeepAt(row);
      if (deep !== null) {
        return {
          key: planned.key,
          status: "failed",
          data: planned.input,
          error: `row_too_deep: the computed row nests past ${MAX_JSON_DEPTH} levels at ${deep.join(".").slice(0, 200)}`,
        };
      }
      const size = JSON.stringify(row).length;
      if (size > MAX_ROW_RESULT_BYTES) {
        return {
          key: planned.key,
          status: "failed",
          data: planned.input,
          error: `row_too_large: the computed row is ${size} bytes; the limit is ${MAX_ROW_RESULT_BYTES}`,
        };
      }
      return { key: planned.key, status: "completed", data: row, error: null };
    } catch (error) {
      // The run's spend cap (a child play refused by it, say): the attempt stops, as a refused tool call stops it.
      if (error instanceof SpendCapReached) latch.trip(error);
      if (signal.aborted || latch.tripped) return null;
      const message = error instanceof ToolCallError ? `${error.code}: ${error.message}` : messageOf(error);
      return {
        key: planned.key,
        status: "failed",
        data: storable(row) ?? planned.input,
        error: this.#deps.redact(message.slice(0, 16_000)).slice(0, 8000),
      };
    }
  }
}

/**
 * What the fields computed before a failure, as a completed row could hold
 * it; null (the row keeps its input) when it cannot: a row too deep or too
 * large would fail its whole persist batch, and the run with it.
 */
function storable(row: Row): Row | null {
  let text: string;
  try {
    text = JSON.stringify(row);
  } catch {
    // A field returned something JSON cannot hold (a cycle, a BigInt).
    return null;
  }
  if (text.length > MAX_ROW_RESULT_BYTES) return null;
  const kept = JSON.parse(text) as Row;
  return tooDeepAt(kept) === null ? kept : null;
}
