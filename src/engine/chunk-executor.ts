/**
 * Executes one chunk attempt: claim its rows, compute the pending ones, and
 * persist them fenced by the attempt. The coordinator only sees this
 * interface, so where the work runs (in its own invocation, or spread over
 * others) can change without touching the map logic.
 */
import { ToolCallError } from "../play/tool-error";
import type { FieldSet, Row, RowContext } from "../play/types";
import { messageOf } from "../shared/errors";
import type { AttemptRef, PersistRowsRequest } from "../storage/contracts";
import { WorkerBarrier } from "./bulk-queue";
import type { FatalLatch } from "./latch";
import type { RuntimePolicy } from "./policy";
import type { PlannedRow } from "./row-keys";
import type { SheetClient } from "./shard-clients";
import type { ToolScheduler } from "./tool-scheduler";

/** A computed row larger than this fails instead of being stored. */
export const MAX_ROW_RESULT_BYTES = 256 * 1024;

export interface ChunkAttempt {
  map: string;
  chunk: number;
  attempt: AttemptRef;
  rows: readonly PlannedRow[];
}

export interface ChunkSummary {
  /** Rows now completed: computed by this attempt, or reused from an earlier one. */
  completed: number;
  failed: number;
  /** Of `completed`, rows reused without work. */
  reused: number;
  /** Rows leased by another live attempt: not executed here. */
  blocked: { key: string; leaseExpiresAt: number }[];
  /** Rows this attempt computed but no longer owned when it wrote them. */
  rejected: string[];
  /** A few failed rows, for the run's failure samples. */
  failureSamples: { key: string; error: string }[];
}

export interface ChunkExecutor {
  execute(chunk: ChunkAttempt): Promise<ChunkSummary>;
}

export interface InProcessExecutorOptions {
  sheets: SheetClient;
  fields: FieldSet;
  policy: RuntimePolicy;
  /** `force`: recompute rows completed by other runs. */
  recompute: boolean;
  latch: FatalLatch;
  signal: AbortSignal;
  scheduler(attempt: AttemptRef, workers: WorkerBarrier): ToolScheduler;
  log(line: string): void;
}

/** Runs chunk attempts inside the calling invocation. */
export class InProcessChunkExecutor implements ChunkExecutor {
  #o: InProcessExecutorOptions;

  constructor(options: InProcessExecutorOptions) {
    this.#o = options;
  }

  async execute({ attempt, rows }: ChunkAttempt): Promise<ChunkSummary> {
    const { sheets, policy, latch, signal } = this.#o;
    const summary: ChunkSummary = { completed: 0, failed: 0, reused: 0, blocked: [], rejected: [], failureSamples: [] };
    const claims = await sheets.claimRows({ attempt, rows, recompute: this.#o.recompute, leaseTtlMs: policy.rowLeaseTtlMs });
    const pending: PlannedRow[] = [];
    for (const row of rows) {
      const claim = claims.get(row.key);
      if (!claim) throw new Error(`claimRows returned no answer for row ${row.key}`);
      if (claim.status === "completed") {
        summary.completed++;
        summary.reused++;
      } else if (claim.status === "blocked") summary.blocked.push({ key: row.key, leaseExpiresAt: claim.leaseExpiresAt });
      else pending.push(row);
    }

    const workers = new WorkerBarrier();
    const scheduler = this.#o.scheduler(attempt, workers);
    const results: PersistRowsRequest["rows"] = [];
    await forEachLimited(pending, policy.rowConcurrency, async (planned) => {
      workers.enter();
      try {
        const outcome = await this.#computeRow(planned, scheduler);
        if (outcome) results.push(outcome);
      } finally {
        workers.leave();
      }
    });

    if (results.length) {
      const persisted = await sheets.persistRows(attempt, results).catch((error: unknown) => {
        const fatal = new Error(`[sheet_store_failed] could not persist ${results.length} rows: ${messageOf(error)}`);
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
    // Rows left unpersisted by a cancel or a tripped latch keep their leases until teardown releases them.
    signal.throwIfAborted();
    if (latch.tripped) throw latch.tripped;
    return summary;
  }

  /** Computes one row's fields in order; `null` when the attempt stopped before the row ended. */
  async #computeRow(planned: PlannedRow, scheduler: ToolScheduler): Promise<PersistRowsRequest["rows"][number] | null> {
    const { signal, latch } = this.#o;
    const row: Row = { ...planned.input };
    const ctx = <RowContext>{ // runPlay and fetch are added by RunContext.map (src/engine/play-context.ts)
      rowKey: planned.key,
      signal,
      tool: (toolId, input, options) => scheduler.call(toolId, input, options) as Promise<any>,
      log: (...args) => this.#o.log(`[row ${planned.key}] ${args.map(String).join(" ")}`),
    };
    try {
      for (const [name, fn] of Object.entries(this.#o.fields)) {
        const value = await fn(row, ctx);
        row[name] = value === undefined ? null : value;
      }
      const size = JSON.stringify(row).length;
      if (size > MAX_ROW_RESULT_BYTES) {
        return { key: planned.key, status: "failed", data: planned.input, error: `row_too_large: the computed row is ${size} bytes; the limit is ${MAX_ROW_RESULT_BYTES}` };
      }
      return { key: planned.key, status: "completed", data: row, error: null };
    } catch (error) {
      if (signal.aborted || latch.tripped) return null;
      const message = error instanceof ToolCallError ? `${error.code}: ${error.message}` : messageOf(error);
      return { key: planned.key, status: "failed", data: jsonSafe(row) ?? planned.input, error: message.slice(0, 8000) };
    }
  }
}

function jsonSafe(row: Row): Row | null {
  try {
    return JSON.parse(JSON.stringify(row)) as Row;
  } catch {
    // A field returned something JSON cannot hold (a cycle, a BigInt): keep the input only.
    return null;
  }
}

async function forEachLimited<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) await fn(items[next++]!);
  });
  await Promise.all(workers);
}
