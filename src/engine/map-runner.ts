/**
 * `ctx.map` inside the coordinator: plans rows into chunks (recorded once, so
 * a replay continues where the last invocation stopped), dispatches up to K
 * chunk attempts at once under the run's attempt epoch, records each outcome
 * and progress, and reconciles the sheets against the plan at the end.
 */
import type { DatasetHandle, FieldSet, MapOptions, Row, ToolDefinition } from "../play/types";
import { codeOf, messageOf, TerminalError, TroupeError } from "../shared/errors";
import type { AttemptRef } from "../storage/contracts";
import type { MapRecord, RunRecord, RunStore } from "../run/run-store";
import { createMapGuards, type DispatchServices, type MapGuards } from "../dispatch/services";
import type { WorkerBarrier } from "./bulk-queue";
import { InProcessChunkExecutor, type ChunkSummary } from "./chunk-executor";
import { readPage } from "./dataset-view";
import type { RuntimePolicy } from "./policy";
import { planRows, type PlannedRow } from "./row-keys";
import { SheetClient, type SubrequestMeter } from "./shard-clients";
import { ToolScheduler } from "./tool-scheduler";

/** Thrown through the play to end this invocation; the alarm resumes the run at `resumeAt`. */
export class YieldSignal extends Error {
  constructor(readonly resumeAt: number, reason: string) {
    super(`yield: ${reason}`);
  }
}

/** A storage actor could not be reached: retry the invocation, do not fail the run. */
export class InfraError extends TroupeError {
  constructor(message: string, cause: unknown) {
    super("infrastructure_unavailable", message, { cause });
  }
}

export interface MapRunnerOptions {
  env: Env;
  run: RunRecord;
  store: RunStore;
  policy: RuntimePolicy;
  tools: ReadonlyMap<string, ToolDefinition>;
  meter: SubrequestMeter;
  signal: AbortSignal;
  log(line: string): void;
  /** Appends a ledger event. */
  emit(type: string, data: Record<string, unknown>): void;
  now(): number;
  /** Tool dispatch for this invocation (pacing, retries, faults, salvage). */
  dispatch: DispatchServices;
}

const MAP_NAME = /^[a-z0-9][a-z0-9_-]{0,63}$/;

export class MapRunner {
  #o: MapRunnerOptions;
  #lastProgressAt = new Map<string, number>();
  #startedAt: number;
  #computedSinceStart = new Map<string, number>();

  constructor(options: MapRunnerOptions) {
    this.#o = options;
    this.#startedAt = options.now();
  }

  /** Map-wide dispatch guards: one circuit breaker, one window of waves, one completion ladder. */
  guards(): MapGuards {
    return createMapGuards({ policy: this.#o.policy, deadlineAt: this.#o.run.deadlineAt, now: this.#o.now });
  }

  scheduler(attempt: AttemptRef, guards: MapGuards, workers?: WorkerBarrier): ToolScheduler {
    return new ToolScheduler({ services: this.#o.dispatch, guards, attempt, refresh: this.#o.run.forceToolRefresh, workers });
  }

  async map(name: string, rows: readonly Row[], fields: FieldSet, options: MapOptions = {}): Promise<DatasetHandle> {
    if (!MAP_NAME.test(name)) throw new TerminalError("invalid_map_name", `map name ${JSON.stringify(name)} must match [a-z0-9_-]{1,64}`);
    if (!Array.isArray(rows)) throw new TerminalError("invalid_map_rows", `ctx.map("${name}") needs an array of rows`);
    const plan = await planRows(rows, options.key);
    const record = this.#o.store.map(name) ?? (await this.#createMap(name, plan.rows.length, plan.duplicatesDropped));
    if (record.total !== plan.rows.length) {
      throw new TerminalError("nondeterministic_play", `map "${name}" was planned with ${record.total} rows but the replayed play passed ${plan.rows.length}; play code must be deterministic outside ctx`);
    }
    const sheets = this.#sheets(record);
    if (!record.done) await this.#drain(record, plan.rows, sheets, fields, options);
    return this.#handle(record, sheets);
  }

  #sheets(record: MapRecord): SheetClient {
    const { env, run, meter } = this.#o;
    return new SheetClient({ env, meter, faults: this.#o.dispatch.faults, location: { org: run.org, play: run.play, dataset: record.name, shardCount: record.shardCount } });
  }

  async #createMap(name: string, total: number, duplicatesDropped: number): Promise<MapRecord> {
    const { env, run, policy, meter } = this.#o;
    const shardCount = await SheetClient.ensureDataset({ env, org: run.org, play: run.play, dataset: name, shardCount: policy.sheetShards, meter }).catch((error: unknown) => {
      throw new InfraError(`could not open dataset ${name}: ${messageOf(error)}`, error);
    });
    return this.#o.store.createMap({ name, shardCount, total, duplicatesDropped, chunkRows: policy.chunkRows });
  }

  async #drain(record: MapRecord, planned: PlannedRow[], sheets: SheetClient, fields: FieldSet, options: MapOptions): Promise<void> {
    const { store, policy, signal, run } = this.#o;
    const guards = this.guards();
    const latch = guards.latch;
    const executor = new InProcessChunkExecutor({
      sheets, fields, policy, latch, signal, recompute: run.force || run.forceToolRefresh, log: this.#o.log,
      scheduler: (attempt, workers) => this.scheduler(attempt, guards, workers),
    });
    const queue = store.chunks(record.name).filter((c) => c.state !== "done");
    const blockedUntil: number[] = [];
    let rowFailure: { key: string; error: string } | null = null;
    let infra: unknown = null;
    let overBudget = false;

    const dispatch = async (idx: number) => {
      const attemptSeq = this.#o.store.run()!.runAttempt;
      const attempt: AttemptRef = { attemptId: `${run.runId}/${record.name}/${idx}/${attemptSeq}`, runId: run.runId, attemptSeq };
      store.startChunk(record.name, idx, attemptSeq);
      this.#progress(record.name, false);
      const rows = planned.slice(idx * record.chunkRows, (idx + 1) * record.chunkRows);
      let summary: ChunkSummary;
      try {
        summary = await executor.execute({ map: record.name, chunk: idx, attempt, rows });
      } catch (error) {
        // The chunk stays `running`: the next invocation redispatches it under a new epoch.
        if (!signal.aborted && !latch.tripped) infra ??= error;
        return;
      }
      const done = summary.blocked.length === 0 && summary.rejected.length === 0;
      if (summary.blocked.length) blockedUntil.push(Math.min(...summary.blocked.map((b) => b.leaseExpiresAt)));
      if (summary.rejected.length) this.#o.log(`chunk ${record.name}#${idx}: ${summary.rejected.length} rows were written by a newer attempt; retrying the chunk`);
      store.finishChunk(record.name, idx, { done, completed: summary.completed, failed: summary.failed, reused: summary.reused, blocked: summary.blocked.length, failureSamples: summary.failureSamples });
      const computed = summary.completed + summary.failed - summary.reused;
      this.#computedSinceStart.set(record.name, (this.#computedSinceStart.get(record.name) ?? 0) + computed);
      if (done) this.#o.emit("chunk.completed", { map: record.name, chunk: idx, completed: summary.completed, failed: summary.failed, reused: summary.reused, attemptSeq });
      if (summary.failed > 0 && options.onRowError === "fail") rowFailure ??= summary.failureSamples[0] ?? { key: "?", error: "row failed" };
      this.#progress(record.name, false);
    };

    const stop = () => signal.aborted || latch.tripped !== null || rowFailure !== null || infra !== null || (overBudget ||= this.#o.meter.total >= policy.invocationSubrequestBudget);
    let next = 0;
    const workers = Array.from({ length: Math.min(policy.chunkConcurrency, queue.length) }, async () => {
      while (next < queue.length && !stop()) {
        const chunk = queue[next++]!;
        if (chunk.retries > policy.blockedRetries) {
          throw new TerminalError("rows_blocked", `map "${record.name}" chunk ${chunk.idx}: rows stayed leased by another run through ${policy.blockedRetries} retries; wait for that run to finish (or cancel it) and rerun`);
        }
        await dispatch(chunk.idx);
      }
    });
    await Promise.all(workers);
    this.#progress(record.name, true);

    signal.throwIfAborted();
    if (latch.tripped) {
      const code = codeOf(latch.tripped) ?? "receipt_store_failed";
      throw new TerminalError(code, `${latch.tripped.message}; the circuit breaker prevented ${latch.prevented} provider calls after the failure (none reached the provider; a rerun makes each once)`, { cause: latch.tripped });
    }
    if (rowFailure) {
      const { key, error } = rowFailure;
      throw new TerminalError("row_failed", `map "${record.name}": row ${key} failed (onRowError: 'fail'): ${error}`);
    }
    if (infra) throw new InfraError(`map "${record.name}": ${messageOf(infra)}`, infra);
    const left = store.chunks(record.name).filter((c) => c.state !== "done").length;
    if (left > 0) {
      if (overBudget) throw new YieldSignal(this.#o.now(), "subrequest budget of this invocation spent");
      const at = blockedUntil.length ? Math.max(this.#o.now(), Math.min(...blockedUntil)) + 50 : this.#o.now();
      throw new YieldSignal(at, `${left} chunks of "${record.name}" wait for rows leased by another run`);
    }
    await this.#reconcile(record, sheets);
  }

  /** The sheets must hold every planned row of this run in a terminal state. */
  async #reconcile(record: MapRecord, sheets: SheetClient): Promise<void> {
    const counts = await sheets.countRunRows(this.#o.run.runId).catch((error: unknown) => {
      throw new InfraError(`could not reconcile "${record.name}": ${messageOf(error)}`, error);
    });
    const expected = this.#o.store.progress(record.name);
    if (counts.total !== record.total || counts.pending > 0 || counts.completed !== expected.completed || counts.failed !== expected.failed) {
      throw new TerminalError(
        "reconcile_failed",
        `map "${record.name}": the sheets hold ${counts.completed} completed, ${counts.failed} failed and ${counts.pending} unfinished of ${counts.total} rows, but the chunks reported ${expected.completed} completed and ${expected.failed} failed of ${record.total}`,
      );
    }
    this.#o.store.markMapDone(record.name);
  }

  #progress(map: string, force: boolean): void {
    const now = this.#o.now();
    if (!force && now - (this.#lastProgressAt.get(map) ?? 0) < this.#o.policy.progressIntervalMs) return;
    this.#lastProgressAt.set(map, now);
    const progress = this.#o.store.progress(map);
    const elapsedS = Math.max(0.001, (now - this.#startedAt) / 1000);
    const rowsPerSecond = Math.round(((this.#computedSinceStart.get(map) ?? 0) / elapsedS) * 10) / 10;
    const remaining = progress.total - progress.completed - progress.failed;
    const etaSeconds = rowsPerSecond > 0 ? Math.ceil(remaining / rowsPerSecond) : null;
    this.#o.emit("map.progress", { map, ...progress, rowsPerSecond, etaSeconds });
  }

  #handle(record: MapRecord, sheets: SheetClient): DatasetHandle {
    const progress = this.#o.store.progress(record.name);
    const runId = this.#o.run.runId;
    return {
      name: record.name,
      total: record.total,
      completed: progress.completed,
      failed: progress.failed,
      duplicatesDropped: record.duplicatesDropped,
      rows: ({ offset = 0, limit = 100 } = {}) => readPage(sheets, runId, offset, limit),
    };
  }
}
