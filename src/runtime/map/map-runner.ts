/**
 * `ctx.map` inside the coordinator: plans rows into chunks (recorded once, so
 * a replay continues where the last invocation stopped), dispatches up to K
 * chunk attempts at once under the run's attempt epoch, records each outcome
 * and progress, and reconciles the sheets against the plan at the end.
 *
 * An attempt that died (it lost its leases, a late write was rejected, it
 * threw) leaves its chunk `running`; this invocation stops dispatching and
 * yields, and the next one fences the dead attempt off by bumping the epoch
 * and redispatches the chunk (a bounded number of times).
 */
import type { z } from "zod";
import type { DatasetHandle, FieldSet, MapOptions, MapRows, Row, AnyTool } from "../../play/types";
import { isUploadedRows } from "../../play/define";
import { UploadRows } from "./upload-rows";
import { messageOf, TerminalError, TroupeError } from "../../core/errors";
import { InfraError, YieldSignal } from "../invocation/yield";
import { DrainOutcome } from "./drain-outcome";
import { ChunkResults } from "./chunk-results";
import type { AttemptRef } from "../../contracts/shards";
import type { ChunkRecord, MapRecord, RunStore } from "../../stores/run-store";
import { createMapGuards, type DispatchServices, type MapGuards } from "../tools/services";
import { attemptServices, type AttemptLeases } from "./attempt-leases";
import type { WorkerBarrier } from "../../core/bulk-queue";
import { type AttemptOutcome, type ChunkAttempt, type ChunkExecutor, InProcessChunkExecutor, type ChunkSummary } from "./chunk-executor";
import type { ExecutorAttempts } from "../executor/executor-attempts";
import { mapExecutors } from "../executor/map-executors";
import { RunInline } from "../executor/remote-executor";
import { WindDown, windDownAt } from "../executor/wind-down";
import { WorkerPool } from "./worker-pool";

import { readWindow } from "./dataset-view";
import { planFinalize } from "./finalize";
import type { PlannedRow } from "../../contracts/shards";
import { planRows } from "./row-keys";
import { ChunkQueue } from "./chunk-queue";
import type { LiveRows } from "./live-rows";
import { MapProgressFeed } from "./map-progress";
import { SheetClient } from "../../clients/shards";
import { ToolScheduler } from "../tools/tool-scheduler";
import type { InvocationScope } from "../invocation/scope";
import { chunkRowsFor, shardCountFor } from "../../core/policy";
import { redactorFor } from "../views/redact";
import type { SecretValues } from "../invocation/play-fetch";

export interface MapRunnerOptions {
  /** The invocation the maps run in. */
  scope: InvocationScope;
  /** The run's chunk plan and progress. */
  store: RunStore;
  tools: ReadonlyMap<string, AnyTool>;
  /** Tool dispatch for this invocation (pacing, retries, faults, salvage). */
  dispatch: DispatchServices;
  /** Rows of running chunks as they settle: the progress counts them before their chunk ends. */
  live: LiveRows;
  /** The coordinator's executors' reports; null runs every chunk attempt in this invocation. */
  executors: ExecutorAttempts | null;
  /** The play's row schema (`rowsInput`): rows read from an upload are checked against it. */
  rowSchema: z.ZodType<Row, unknown> | null;
  /** Secret header values the invocation's fetches sent: redacted from failed rows' errors too. */
  secrets: SecretValues;
  /** Why executors cannot be sent the invocation's source now (it is too large), or null: asked as a map starts. */
  sourceOverBudget(): string | null;
}

const MAP_NAME = /^[a-z0-9][a-z0-9_-]{0,63}$/;

export class MapRunner {
  #deps: MapRunnerOptions;
  #scope: InvocationScope;
  /** The maps' progress and chunk completions, as their watchers hear them. */
  #feed: MapProgressFeed;
  /** The maps the play has called in this invocation (a replay calls each once more, in a new invocation). */
  #called = new Set<string>();
  /** Maps whose rows need the coordinator (a row starts a child play): their chunks run here. */
  #inline = new Set<string>();
  /** See {@link interrupted}. */
  #interrupted: unknown = null;
  /** The maps under way, by name (see {@link idle}). */
  #running = new Map<Promise<unknown>, string>();

  constructor(options: MapRunnerOptions) {
    this.#deps = options;
    this.#scope = options.scope;
    this.#feed = new MapProgressFeed({ scope: options.scope, store: options.store, live: options.live });
  }

  /** Map-wide dispatch guards: one circuit breaker, one window of waves, one completion ladder. */
  guards(): MapGuards {
    return createMapGuards({ policy: this.#scope.policy, deadlineAt: this.#scope.run.deadlineAt, now: this.#scope.now });
  }

  /** A tool scheduler for one attempt; with `leases`, its tool path stops when they are lost and reports its receipts to them. */
  scheduler(attempt: AttemptRef, guards: MapGuards, workers?: WorkerBarrier, leases?: AttemptLeases): ToolScheduler {
    const services = leases ? attemptServices(this.#deps.dispatch, leases) : this.#deps.dispatch;
    return new ToolScheduler({
      services,
      guards,
      attempt,
      refresh: this.#scope.run.forceToolRefresh,
      retryUnknown: this.#scope.run.retryUnknown,
      workers,
    });
  }

  /**
   * The first time a map stopped for the runtime rather than the play (a
   * yield, an infrastructure failure, a cancel, the runtime limit, a row's
   * long child): a play that catches it and returns has not ended; its
   * invocation ends as though the play had let it through.
   */
  get interrupted(): unknown {
    return this.#interrupted;
  }

  /** The names of the maps of this invocation under way now. */
  get running(): string[] {
    return [...this.#running.values()];
  }

  /**
   * Resolves once no map of this invocation is under way: one the play left running (the other maps of a
   * `Promise.all` one of which threw) drains until the invocation's signal stops it (Invocation.play).
   */
  async idle(): Promise<void> {
    while (this.#running.size > 0) await Promise.allSettled([...this.#running.keys()]);
  }

  /**
   * `ctx.map`. A map the play does not await fails its run when the play returns (Invocation.play): its rejection
   * then, as the invocation stops it, is expected, and is not reported as unhandled.
   */
  map(name: string, rows: MapRows, fields: FieldSet, options: MapOptions = {}): Promise<DatasetHandle> {
    const called = this.#track(name, rows, fields, options);
    called.catch(() => {});
    return called;
  }

  async #track(name: string, rows: MapRows, fields: FieldSet, options: MapOptions): Promise<DatasetHandle> {
    const running = this.#map(name, rows, fields, options);
    this.#running.set(running, name);
    try {
      return await running;
    } catch (error) {
      if (this.#interrupted === null && (error instanceof YieldSignal || error instanceof InfraError || this.#scope.signal.aborted))
        this.#interrupted = error;
      throw error;
    } finally {
      this.#running.delete(running);
    }
  }

  async #map(name: string, rows: MapRows, fields: FieldSet, options: MapOptions): Promise<DatasetHandle> {
    if (!MAP_NAME.test(name)) throw new TerminalError("invalid_map_name", `map name ${JSON.stringify(name)} must match [a-z0-9_-]{1,64}`);
    // A map's record is its name's: a second call would answer the first one's rows and counts, its own never computed.
    if (this.#called.has(name))
      throw new TerminalError(
        "duplicate_map_name",
        `ctx.map("${name}") was called twice in one run; give each map a name of its own (a map's name is its dataset)`,
      );
    this.#called.add(name);
    const input = await this.#plan(name, rows, options);
    const record = this.#deps.store.map(name) ?? (await this.#createMap(name, input.total, input.duplicatesDropped));
    if (record.total !== input.total) {
      throw new TerminalError(
        "nondeterministic_play",
        `map "${name}" was planned with ${record.total} rows but the replayed play passed ${input.total}; play code must be deterministic outside ctx`,
      );
    }
    const sheets = this.#sheets(record);
    // Finalize may send chunks whose rows are not persisted back: each pass drains what is left.
    for (let current = record; !current.done; current = this.#deps.store.map(name)!)
      await this.#drain(current, input, sheets, fields, options);
    return this.#handle(record, sheets);
  }

  /**
   * The map's rows: in hand, keyed now; or in an upload, counted from its
   * index and read chunk by chunk by the attempts (never held here).
   */
  async #plan(name: string, rows: MapRows, options: MapOptions): Promise<MapInput> {
    if (isUploadedRows(rows)) {
      const { env, run } = this.#scope;
      const reader = new UploadRows({
        bucket: env.UPLOADS,
        org: run.org,
        key: options.key,
        schema: this.#deps.rowSchema,
        faults: this.#deps.dispatch.faults,
      });
      const total = await reader.count(rows.upload).catch((error: unknown) => {
        if (error instanceof TerminalError) throw error;
        throw new InfraError(`could not open upload ${rows.upload}: ${messageOf(error)}`, error);
      });
      return { kind: "upload", upload: rows.upload, total, duplicatesDropped: 0, reader };
    }
    if (!Array.isArray(rows)) throw new TerminalError("invalid_map_rows", `ctx.map("${name}") needs an array of rows or an upload's rows`);
    const plan = await planRows(rows, options.key);
    return { kind: "rows", rows: plan.rows, total: plan.rows.length, duplicatesDropped: plan.duplicatesDropped };
  }

  #sheets(record: MapRecord): SheetClient {
    const { env, run, meter } = this.#scope;
    return new SheetClient({
      env,
      meter,
      faults: this.#deps.dispatch.faults,
      location: { org: run.org, play: run.play, dataset: record.name, shardCount: record.shardCount },
    });
  }

  async #createMap(name: string, total: number, duplicatesDropped: number): Promise<MapRecord> {
    const { env, run, policy, meter } = this.#scope;
    const shardCount = await SheetClient.ensureDataset({
      env,
      org: run.org,
      play: run.play,
      dataset: name,
      shardCount: shardCountFor(total, policy),
      meter,
    }).catch((error: unknown) => {
      throw new InfraError(`could not open dataset ${name}: ${messageOf(error)}`, error);
    });
    return this.#deps.store.createMap({ name, shardCount, total, duplicatesDropped, chunkRows: chunkRowsFor(total, policy) });
  }

  #runsHere(map: string, reason: string): void {
    this.#inline.add(map);
    this.#scope.log(`map "${map}" runs in the coordinator for the rest of this invocation: ${reason}`);
  }

  async #drain(record: MapRecord, input: MapInput, sheets: SheetClient, fields: FieldSet, options: MapOptions): Promise<void> {
    const { store } = this.#deps;
    const { policy, signal, run } = this.#scope;
    const guards = this.guards();
    const latch = guards.latch;
    // Attempts running here when the invocation nears the platform's limits stop sending and leave the rest of their
    // chunk to the next invocation (wind-down.ts): dispatch stops at the budget, but they may run long past it.
    const windDown = new WindDown({ meter: this.#scope.meter, limits: policy, now: this.#scope.now, startedAt: this.#feed.startedAt });
    // Attempts in executors go on past an executor's invocation, but this one waits for them, and an alarm runs 15
    // minutes at most: near then, those still running wind down and hand their rows back, and the invocation yields.
    const executorsWindDown = windDownAt(this.#feed.startedAt + policy.coordinatorWindDownMs, {
      now: this.#scope.now,
      reason: () => new TroupeError("wound_down", `its coordinator's invocation has run ${policy.coordinatorWindDownMs} ms`),
    });
    const inProcess = new InProcessChunkExecutor({
      sheets,
      receipts: this.#deps.dispatch.receipts,
      fields,
      policy,
      latch,
      signal,
      windDown: windDown.signal,
      recompute: run.force || run.forceToolRefresh,
      log: this.#scope.log,
      redact: (text) => redactorFor(this.#scope.env).redact(this.#deps.secrets.redact(text)),
      now: this.#scope.now,
      scheduler: (attempt, workers, leases) => this.scheduler(attempt, guards, workers, leases),
      readSlice: input.kind === "upload" ? (slice) => input.reader.read(slice) : undefined,
      onRow: (chunk, event) => {
        if (event === "started") this.#deps.live.started(record.name, chunk);
        else {
          this.#deps.live.settled(record.name, chunk, event);
          this.#feed.tell(record.name, false);
        }
      },
    });
    // Each report may change what the map needs (a provider's latency): the pool grows as it does.
    let grow = () => {};
    // The chunks it has left and its attempts running bound the executors it asks the org for.
    let demand = () => Number.POSITIVE_INFINITY;
    // A source past what one call carries could not be sent to any executor: the map runs here from the start.
    if (this.#deps.executors && policy.maxExecutors > 0 && !this.#inline.has(record.name)) {
      const tooLarge = this.#deps.sourceOverBudget();
      if (tooLarge) this.#runsHere(record.name, tooLarge);
    }
    const remote = this.#inline.has(record.name)
      ? null
      : mapExecutors({
          scope: this.#scope,
          attempts: this.#deps.executors,
          store,
          dataset: { org: run.org, play: run.play, dataset: record.name, shardCount: record.shardCount },
          latch,
          demand: () => demand(),
          windDown: executorsWindDown.signal,
          onReport: () => {
            this.#feed.tell(record.name, false);
            grow();
          },
          onSlot: (delta) => this.#deps.live.remote(record.name, delta),
        });
    await remote?.sizer.start();
    const queue = new ChunkQueue(
      store.chunks(record.name).filter((c) => c.state !== "done"),
      { sweepable: !(run.force || run.forceToolRefresh) },
    );
    const outcome = new DrainOutcome(record.name, latch, signal);
    const results = new ChunkResults({
      map: record.name,
      scope: this.#scope,
      store,
      feed: this.#feed,
      outcome,
      failOnRow: options.onRowError === "fail",
      reusedOnly: () => {
        remote?.sizer.observeReusedOnly();
        queue.reusedOnly();
      },
    });
    // A row an earlier invocation saw fail (it ended before failing the run: a crash, a child that ran long) fails it now.
    if (
      options.onRowError === "fail" &&
      store.chunks(record.name).some((chunk) => (chunk.state === "done" || chunk.resume !== null) && chunk.failed > 0)
    ) {
      const sample = store.failureSamples().find((s) => s.map === record.name);
      outcome.rowFailed(sample ?? { key: "?", error: "a row failed in an earlier invocation" });
    }

    const executorOf = (): ChunkExecutor => (remote && !this.#inline.has(record.name) ? remote.executor : inProcess);

    /** Runs the attempt in an executor, or here when the map cannot run there (a row starts a child play). */
    const execute = async (attempt: ChunkAttempt): Promise<AttemptOutcome> => {
      if (!remote || this.#inline.has(record.name)) return inProcess.execute(attempt);
      try {
        return await remote.executor.execute(attempt);
      } catch (error) {
        if (!(error instanceof RunInline)) throw error;
        this.#runsHere(record.name, error.message);
      }
      // The same attempt, here: its rows' and receipts' leases are its own.
      this.#deps.live.ended(record.name, attempt.chunk);
      return inProcess.execute(attempt);
    };

    const dispatch = async (chunk: ChunkRecord) => {
      const idx = chunk.idx;
      const attemptSeq = this.#deps.store.run()!.runAttempt;
      const attempt: AttemptRef = { attemptId: `${run.runId}/${record.name}/${idx}/${attemptSeq}`, runId: run.runId, attemptSeq };
      store.startChunk(record.name, idx, attemptSeq);
      this.#feed.tell(record.name, false);
      const from = idx * record.chunkRows;
      const to = Math.min(record.total, from + record.chunkRows);
      let summary: AttemptOutcome;
      try {
        summary = await execute(
          input.kind === "upload"
            ? { map: record.name, chunk: idx, attempt, rows: [], slice: { upload: input.upload, from, to }, resume: chunk.resume }
            : { map: record.name, chunk: idx, attempt, rows: input.rows.slice(from, to), resume: chunk.resume },
        );
      } catch (error) {
        // The chunk stays `running`: the next invocation redispatches it under a new epoch.
        outcome.infraFailed(error);
        return;
      } finally {
        // From here the chunk's rows count from storage (finishChunk follows with no await between).
        this.#deps.live.ended(record.name, idx);
      }
      results.attempted(chunk, attemptSeq, summary);
    };

    /** Records the chunks of `group` a sweep found wholly reused, as their attempts would have; the rest go back for dispatch. */
    const sweep = async (group: ChunkRecord[]) => {
      const attemptSeq = store.run()!.runAttempt;
      const first = group[0]!.idx;
      const from = first * record.chunkRows;
      const to = from + group.reduce((sum, chunk) => sum + chunk.rows, 0);
      let reused: number[] = [];
      try {
        reused = await executorOf().sweep({
          map: record.name,
          attempt: { attemptId: `${run.runId}/${record.name}/sweep-${first}/${attemptSeq}`, runId: run.runId, attemptSeq },
          chunks: group.map((chunk) => ({ chunk: chunk.idx, rows: chunk.rows })),
          rows: input.kind === "rows" ? input.rows.slice(from, to) : [],
          slice: input.kind === "upload" ? { upload: input.upload, from, to } : null,
          key: typeof options.key === "string" ? options.key : null,
          keyInPlay: typeof options.key === "function",
        });
      } catch (error) {
        // Nothing was leased: each chunk's own attempt finds out what went wrong, and says so.
        if (!signal.aborted)
          this.#scope.log(
            `sweep of "${record.name}" chunks ${first}–${group.at(-1)!.idx} failed (${messageOf(error)}); they run one by one`,
          );
      }
      // Some rows need work: the rest of the map is not a plain rerun.
      queue.giveBack(group.filter((chunk) => !reused.includes(chunk.idx)));
      results.swept(group, reused, attemptSeq);
    };

    const stop = () =>
      outcome.stopped({
        subrequests: this.#scope.meter.total,
        maxSubrequests: policy.invocationSubrequestBudget,
        elapsedMs: this.#scope.now() - this.#feed.startedAt,
        maxElapsedMs: policy.invocationWallMs,
        woundDown: windDown.signal.aborted || executorsWindDown.signal.aborted,
      });
    // Chunks go out from a pool of workers: as many as the executors the map should have (sizing.ts), and one more
    // per executor whose attempt drains (its next runs alongside); or K in the coordinator.
    const width = () =>
      remote && !this.#inline.has(record.name)
        ? remote.sizer.target() + remote.executor.spare
        : Math.min(policy.chunkConcurrency, queue.size);
    const pool = new WorkerPool({
      queue,
      width,
      stopped: stop,
      run: (group) => (group.length > 1 ? sweep(group) : dispatch(group[0]!)),
    });
    demand = () => queue.left + pool.working;
    grow = () => pool.grow();
    grow();
    try {
      await pool.settled();
    } finally {
      windDown.close();
      executorsWindDown.close();
      // However the drain ends (a failed run's too), the ledger has every chunk it completed.
      this.#feed.flushChunks(record.name);
      await remote?.sizer.stop();
    }
    this.#feed.tell(record.name, true);

    const left = store.chunks(record.name).filter((c) => c.state !== "done").length;
    outcome.throwIfUnfinished(left, this.#scope.now(), results.blockedUntil);
    await this.#finalize(record, sheets);
  }

  /** After the last chunk: the sheets must hold every planned row, terminal (see finalize.ts). */
  async #finalize(record: MapRecord, sheets: SheetClient): Promise<void> {
    const { store } = this.#deps;
    const { policy, run } = this.#scope;
    const persisted = await sheets.countRunChunks(run.runId, record.chunkRows).catch((error: unknown) => {
      throw new InfraError(`could not reconcile "${record.name}": ${messageOf(error)}`, error);
    });
    const plan = planFinalize({
      map: record.name,
      total: record.total,
      chunks: store.chunks(record.name),
      persisted,
      repairs: record.repairs,
      maxRepairs: policy.reconcileRepairs,
    });
    if (plan.kind === "fail") throw new TerminalError("reconcile_failed", plan.message);
    if (plan.kind === "repair") {
      const repairs = store.reopenChunks(record.name, plan.chunks);
      this.#scope.log(
        `finalize of "${record.name}": ${plan.missing} rows are not persisted (chunks ${plan.chunks.slice(0, 5).join(", ")}${plan.chunks.length > 5 ? ", …" : ""}); running those chunks again (repair ${repairs} of ${policy.reconcileRepairs})`,
        "map_repaired",
      );
      return;
    }
    for (const { idx, completed, failed } of plan.adjust) store.setChunkCounts(record.name, idx, { completed, failed });
    if (plan.adjust.length)
      this.#scope.log(
        `finalize of "${record.name}": counts of ${plan.adjust.length} chunks taken from the sheets (another run rewrote some of their rows since)`,
      );
    store.markMapDone(record.name);
    this.#feed.tell(record.name, true);
  }

  #handle(record: MapRecord, sheets: SheetClient): DatasetHandle {
    const progress = this.#deps.store.progress(record.name);
    const runId = this.#scope.run.runId;
    return {
      name: record.name,
      total: record.total,
      completed: progress.completed,
      failed: progress.failed,
      duplicatesDropped: record.duplicatesDropped,
      rows: ({ offset = 0, limit = 100 } = {}) => readWindow(sheets, runId, offset, limit),
    };
  }
}

/** A map's rows: keyed in hand, or in an upload that each attempt reads its chunk from. */
type MapInput =
  | { kind: "rows"; rows: PlannedRow[]; total: number; duplicatesDropped: number }
  | { kind: "upload"; upload: string; total: number; duplicatesDropped: 0; reader: UploadRows };
