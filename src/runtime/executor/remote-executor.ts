/**
 * The coordinator's chunk executor when attempts run in executors: it hands
 * the attempt to the run's executor in a free slot (which returns at once),
 * then waits for the attempt's end report. An executor not heard from for
 * a row lease's length is given up on: its leases have lapsed by then, and
 * the chunk is redispatched under a new epoch, which fences off whatever the
 * old attempt still does. A cancel (or the run's limit) stops the attempt in
 * its executor at once, then waits a moment for its last report (its bills).
 *
 * An attempt whose last rows are all it has left says it drains: its
 * executor's slot is then spare, and the map's next attempt goes there,
 * alongside it (the executor runs both, the newer on the connections the
 * older leaves idle), rather than to a new executor.
 */
import { type ExecutorClient, executorName } from "../../clients/executors";
import { messageOf, TerminalError, TroupeError } from "../../core/errors";
import type { FatalLatch } from "../../core/latch";
import type { AssignedDataset, AttemptEnd, AttemptReport, ChunkSummary, UsageDelta } from "../../contracts/executors";
import { SpendCapReached } from "../tools/spend";
import { sleep } from "../../core/time";
import type { AttemptOutcome, ChunkAttempt, ChunkExecutor, ChunkSweep } from "../map/chunk-executor";
import type { ExecutorAttempts } from "./executor-attempts";

/**
 * How long an attempt asked to wind down may take to end before it is
 * stopped and its chunk redispatched: its requests in flight answered, its
 * rows stored, its end reported, well inside the 3 minutes between the
 * coordinator's wind-down (12 minutes) and its alarm's 15.
 */
const WIND_DOWN_GRACE_MS = 150_000;

/**
 * How often the ask is repeated until the attempt ends: each ask is one of the coordinator's subrequests, and an
 * attempt may take a provider timeout or two to end (42 attempts asked every second for two minutes would be half
 * an invocation's 10,000).
 */
const WIND_DOWN_ASK_MS = 10_000;

/** The executor's attempt cannot run there (a row starts a child play, say): run it in the coordinator. */
export class RunInline extends TroupeError {
  constructor(reason: string) {
    super("run_inline", reason);
  }
}

export interface RemoteExecutorOptions {
  runId: string;
  dataset: AssignedDataset;
  client: ExecutorClient;
  attempts: ExecutorAttempts;
  /** The map's latch: an attempt's fatal end trips it, as it would have in process. */
  latch: FatalLatch;
  /** The invocation's signal: a cancel, the runtime limit, a suspension. */
  signal: AbortSignal;
  /**
   * The invocation nears its limits: attempts still running are wound down (their end hands back the rows they
   * left, `deferred`), so that it can yield before the platform ends it.
   */
  windDown: AbortSignal;
  /** Given up on after this long without a report. */
  silenceMs: number;
  /** After a stop, how long its last report is awaited. */
  stopWaitMs: number;
  /** `force`: a sweep then reuses only rows this run wrote. */
  recompute: boolean;
  /** Hears each report of each attempt (latency, providers: the sizing). */
  observe(report: AttemptReport): void;
  /** What an executor's sweep used (its reports carry their own). */
  addUsage(usage: UsageDelta): void;
  /** How many executors the map should have now (sizing.ts): past that many, attempts go alongside draining ones. */
  target(): number;
  /** The map has no provider latency to size by yet: its attempts report their first answers early (ChunkAssignment.sizing). */
  sizing(): boolean;
  /** An executor became busy (1) or idle (-1). */
  onSlot?(delta: 1 | -1): void;
  now(): number;
}

export class RemoteChunkExecutor implements ChunkExecutor {
  #deps: RemoteExecutorOptions;
  /** The executors in use, by slot: what each runs, oldest first (a sweep's entry is its attempt id). */
  #slots = new Map<number, string[]>();
  /** Attempts that said they drain. */
  #draining = new Set<string>();

  constructor(options: RemoteExecutorOptions) {
    this.#deps = options;
  }

  /** Executors running attempts (or a sweep) of the map now. */
  get busy(): number {
    return this.#slots.size;
  }

  /** Executors whose only attempt drains: the map may run one more attempt per spare executor, alongside. */
  get spare(): number {
    let spare = 0;
    for (const held of this.#slots.values()) if (held.length === 1 && this.#draining.has(held[0]!)) spare++;
    return spare;
  }

  async execute({ map, chunk, attempt, rows, slice, resume }: ChunkAttempt): Promise<AttemptOutcome> {
    const { client, attempts, signal, runId } = this.#deps;
    const { attemptId } = attempt;
    const { slot, alongside } = this.#take(attemptId);
    const name = executorName(runId, slot);
    const watch = attempts.watch(attemptId, map, chunk, (report) => {
      if (report.draining) this.#draining.add(attemptId);
      this.#deps.observe(report);
    });
    try {
      signal.throwIfAborted();
      await client.assign(name, {
        runId,
        map,
        chunk,
        attempt,
        rows: [...rows],
        slice: slice ?? null,
        dataset: this.#deps.dataset,
        alongside,
        sizing: this.#deps.sizing(),
        invocation: attempts.invocationId ?? undefined,
        resume: resume ?? null,
      });
      const end = await this.#awaitEnd(watch, name, attemptId);
      return this.#summaryOf(end);
    } finally {
      watch.close();
      this.#draining.delete(attemptId);
      this.#release(slot, attemptId);
    }
  }

  /** Sweeps in an executor's own invocation (its subrequests and CPU), answered in the call. */
  async sweep(sweep: ChunkSweep): Promise<number[]> {
    const { client, signal, runId, dataset, recompute } = this.#deps;
    const { attemptId } = sweep.attempt;
    const slot = this.#free(attemptId);
    try {
      signal.throwIfAborted();
      const result = await client.sweep(executorName(runId, slot), {
        ...sweep,
        runId,
        rows: [...sweep.rows],
        recompute,
        dataset,
        invocation: this.#deps.attempts.invocationId ?? undefined,
      });
      this.#deps.addUsage(result.usage);
      return result.reused;
    } finally {
      this.#release(slot, attemptId);
    }
  }

  async #awaitEnd(watch: ReturnType<ExecutorAttempts["watch"]>, name: string, attemptId: string): Promise<AttemptEnd | null> {
    const { signal, silenceMs, now, latch, windDown } = this.#deps;
    // A cancel, the runtime limit, or another attempt of the map tripping its latch: this one stops too.
    // Its listeners go when it ends: a map's signal and latch outlive thousands of attempts.
    let stopListening = () => {};
    // Asked at once, and again every WIND_DOWN_ASK_MS (an ask can be lost, or land as the executor holds it to go on
    // there);
    // its end (its rows handed back) comes as any end does.
    let askedAt = Number.NEGATIVE_INFINITY;
    let firstAskedAt: number | null = null;
    const askWindDown = () => {
      askedAt = now();
      firstAskedAt ??= askedAt;
      void this.#deps.client.windDown(name, attemptId, messageOf(windDown.reason)).catch(() => {});
    };
    const offWindDown = onAbort(windDown, askWindDown);
    const aborted = new Promise<"aborted">((resolve) => {
      const onAbort = () => resolve("aborted");
      if (signal.aborted) resolve("aborted");
      else signal.addEventListener("abort", onAbort, { once: true });
      const offTrip = latch.onTrip(onAbort);
      stopListening = () => {
        signal.removeEventListener("abort", onAbort);
        offTrip();
      };
    });
    try {
      for (;;) {
        if (firstAskedAt !== null && now() - firstAskedAt >= WIND_DOWN_GRACE_MS) {
          const reason = `it did not wind down within ${WIND_DOWN_GRACE_MS} ms of being asked`;
          void this.#deps.client.stop(name, attemptId, reason).catch(() => {});
          return { kind: "stopped", reason };
        }
        if (windDown.aborted && now() - askedAt >= WIND_DOWN_ASK_MS) askWindDown();
        const left = watch.heardAt() + silenceMs - now();
        if (left <= 0) {
          // Given up on: should it still hold the attempt unstarted, it never starts it (the chunk goes elsewhere).
          void this.#deps.client.stop(name, attemptId, `its coordinator did not hear from it for ${silenceMs} ms`).catch(() => {});
          return null;
        }
        const outcome = await raceTimeout<AttemptEnd | "aborted">([watch.ended, aborted], Math.min(left, 1_000));
        if (outcome === "aborted") break;
        if (outcome) return outcome;
      }
    } finally {
      stopListening();
      offWindDown();
    }
    // Stopped here: stop it there too, and give its last report (its bills) a moment.
    const reason = signal.aborted ? signal.reason : latch.tripped;
    // Neither the stop nor the last report may hold the run up longer than the stop wait (an executor can be stuck).
    const stopped = this.#deps.client.stop(name, attemptId, messageOf(reason)).catch(() => {});
    await raceTimeout([Promise.all([stopped, watch.ended])], this.#deps.stopWaitMs);
    throw reason;
  }

  /** The attempt's summary as the map runner records it; a failure or fatal end throws as it would have in process. */
  #summaryOf(end: AttemptEnd | null): AttemptOutcome {
    const lost = (reason: string): ChunkSummary => ({
      completed: 0,
      failed: 0,
      reused: 0,
      blocked: [],
      rejected: [],
      lost: { rows: [], receipts: [], reason },
      failureSamples: [],
    });
    if (end === null) return lost(`its executor was not heard from for ${this.#deps.silenceMs} ms`);
    switch (end.kind) {
      case "summary":
        return end.deferred?.length
          ? { ...end.summary, deferred: end.deferred, unstarted: end.unstarted, stalled: end.stalled }
          : end.summary;
      case "stopped":
        return lost(end.reason);
      case "inline":
        throw new RunInline(end.reason);
      case "failed":
        throw new Error(end.message);
      case "fatal": {
        const error = fatalOf(end);
        this.#deps.latch.trip(error);
        this.#deps.latch.prevent(end.prevented);
        throw this.#deps.latch.tripped!;
      }
    }
  }

  /** Where the attempt runs: alongside a draining attempt once the map has all the executors it should, else in an idle executor. */
  #take(attemptId: string): { slot: number; alongside: string | null } {
    if (this.#slots.size >= this.#deps.target())
      for (const [slot, held] of this.#slots)
        if (held.length === 1 && this.#draining.has(held[0]!)) {
          held.push(attemptId);
          return { slot, alongside: held[0]! };
        }
    return { slot: this.#free(attemptId), alongside: null };
  }

  /** The lowest idle executor's slot (idle for every map of the run), now busy with `attemptId`. */
  #free(attemptId: string): number {
    const busy = this.#deps.attempts.busySlots;
    let slot = 0;
    while (this.#slots.has(slot) || busy.has(slot)) slot++;
    busy.add(slot);
    this.#slots.set(slot, [attemptId]);
    this.#deps.onSlot?.(1);
    return slot;
  }

  #release(slot: number, attemptId: string): void {
    const held = this.#slots.get(slot)?.filter((id) => id !== attemptId) ?? [];
    if (held.length > 0) return void this.#slots.set(slot, held);
    this.#slots.delete(slot);
    this.#deps.attempts.busySlots.delete(slot);
    this.#deps.onSlot?.(-1);
  }
}

/** The error an executor's fatal end stands for (the spend cap keeps its class: the run fails saying so). */
function fatalOf(end: Extract<AttemptEnd, { kind: "fatal" }>): TroupeError {
  if (end.code === "spend_cap_reached") {
    const spent = Number(end.details?.spent ?? 0);
    const maxSpend = Number(end.details?.maxSpend ?? 0);
    return new SpendCapReached(spent, maxSpend, "maxSpend", end.message);
  }
  return new TerminalError(end.code, end.message, { details: end.details });
}

/** Calls `listener` once `signal` aborts (at once if it has); answers how to stop listening. */
function onAbort(signal: AbortSignal, listener: () => void): () => void {
  if (signal.aborted) {
    listener();
    return () => {};
  }
  signal.addEventListener("abort", listener, { once: true });
  return () => signal.removeEventListener("abort", listener);
}

/** The first of `promises` to settle, or undefined after `ms` (the timer does not outlive the race). */
async function raceTimeout<T>(promises: Promise<T>[], ms: number): Promise<T | undefined> {
  const timeout = new AbortController();
  try {
    // The timer's own rejection (aborted below) is nobody's business.
    return await Promise.race([
      ...promises,
      sleep(ms, timeout.signal).then(
        () => undefined,
        () => undefined,
      ),
    ]);
  } finally {
    timeout.abort();
  }
}
