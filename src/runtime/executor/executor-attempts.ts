/**
 * The coordinator's side of its executors' reports. What a report says that
 * must not be lost is applied to the run's storage at once, whether or not
 * an invocation still waits for the attempt: bills (the provider charged
 * them; applied once each, by request key), salvage, usage and log lines.
 * A report is applied once: one sent again because its answer was lost
 * (AttemptReport.seq) only says its executor is alive.
 * What only matters to a live invocation (rows as they settle, the end of an
 * attempt it waits for, latency for sizing) goes to the attempt's watcher.
 */
import type { CaptureSource } from "../../clients/executors";
import type { AttemptEnd, AttemptReport, ReportAnswer, SpendGrant } from "../../contracts/executors";
import type { Emit } from "../../contracts/events";
import { isTerminal } from "../../core/statuses";
import type { RunStore } from "../../stores/run-store";
import { toCredits, toMicros } from "../../stores/spend-store";
import type { LiveRows } from "../map/live-rows";

/**
 * How long a reporter is remembered (ReportsStore): a report is sent again within seconds, an end an
 * executor holds (ExecutorStore.unreported) by its alarm's retries, a minute apart once the platform's run out.
 */
const REPORTER_MEMORY_MS = 24 * 3_600_000;

/** What a watcher of one attempt hears. */
export interface AttemptWatch {
  /** Settles with the attempt's end. */
  readonly ended: Promise<AttemptEnd>;
  /** When the executor was last heard from about this attempt. */
  heardAt(): number;
  /** Stops watching (the attempt ended, or the coordinator gave up on it). */
  close(): void;
}

interface Watched {
  map: string;
  chunk: number;
  heardAt: number;
  end(end: AttemptEnd): void;
  observe(report: AttemptReport): void;
}

/** What executors ask of the invocation that assigned their attempts (invocation.ts). */
export interface InvocationAnswers {
  /** What an executor needs to capture a map's fields, if this is the invocation of epoch `attemptSeq`. */
  source(attemptSeq: number): CaptureSource | null;
  /** Spend for an attempt, under this invocation's caps (it may ask the org for more of its day first). */
  grant(attemptId: string, wantedMicros: number): Promise<SpendGrant>;
}

export class ExecutorAttempts {
  #invocation: InvocationAnswers | null = null;
  #invocationId: string | null = null;
  #store: RunStore;
  #live: LiveRows;
  #emit: Emit;
  #now: () => number;
  /**
   * A bill or salvage reached a run that has ended: its alarm must report the spend again, or write the salvage
   * into its receipts (else a rerun pays for that output again).
   */
  #onLateWork: () => void;
  #watched = new Map<string, Watched>();
  /**
   * The run's executors busy with an attempt, by slot, over all its maps: two
   * maps draining at once (`Promise.all`) take different executors, as an
   * executor given an attempt of one map drops the other's.
   */
  readonly busySlots = new Set<number>();

  constructor(options: { store: RunStore; live: LiveRows; emit: Emit; now(): number; onLateWork(): void }) {
    this.#store = options.store;
    this.#live = options.live;
    this.#emit = options.emit;
    this.#now = options.now;
    this.#onLateWork = options.onLateWork;
  }

  /** The invocation under way answers executors until the returned close. */
  open(answers: InvocationAnswers): () => void {
    this.#store.reports.forget(this.#now() - REPORTER_MEMORY_MS);
    this.#invocation = answers;
    this.#invocationId = crypto.randomUUID();
    return () => {
      if (this.#invocation !== answers) return;
      this.#invocation = null;
      this.#invocationId = null;
    };
  }

  /** The invocation under way, as its assignments and capture sources name it (ChunkAssignment.invocation). */
  get invocationId(): string | null {
    return this.#invocationId;
  }

  /** What the invocation under way had done, if it is of epoch `attemptSeq`; `"unchanged"` if it is `known` too. */
  source(attemptSeq: number, known?: string): CaptureSource | "unchanged" | null {
    if (known !== undefined && this.#invocation && known === this.#invocationId && this.#store.run()?.runAttempt === attemptSeq)
      return "unchanged";
    const source = this.#invocation?.source(attemptSeq) ?? null;
    return source && { ...source, invocation: this.#invocationId ?? undefined };
  }

  /** Between invocations nothing is granted: the attempt asking is stale (its invocation ended). */
  async grant(attemptId: string, wantedMicros: number): Promise<SpendGrant> {
    return (
      (await this.#invocation?.grant(attemptId, wantedMicros)) ?? {
        grantedMicros: 0,
        spentCredits: toCredits(this.#store.spend.billedMicros()),
        cap: null,
      }
    );
  }

  /** Watches the attempt until {@link AttemptWatch.close}; `observe` hears each of its reports. */
  watch(attemptId: string, map: string, chunk: number, observe: (report: AttemptReport) => void): AttemptWatch {
    let resolve!: (end: AttemptEnd) => void;
    const ended = new Promise<AttemptEnd>((r) => (resolve = r));
    const watched: Watched = { map, chunk, heardAt: this.#now(), end: resolve, observe };
    this.#watched.set(attemptId, watched);
    return {
      ended,
      heardAt: () => watched.heardAt,
      close: () => {
        if (this.#watched.get(attemptId) === watched) this.#watched.delete(attemptId);
      },
    };
  }

  /** Applies one report (see the module comment); an attempt no invocation waits for is told to stop. */
  apply(report: AttemptReport): ReportAnswer {
    const store = this.#store;
    // The same attempt as an earlier invocation assigned it (wound down and handed back, its end sent again): not
    // this invocation's, though its bills and usage count all the same.
    const earlier = report.invocation !== undefined && this.#invocationId !== null && report.invocation !== this.#invocationId;
    const watched = earlier ? undefined : this.#watched.get(report.attemptId);
    const answer = this.#heard(report, watched);
    const { reporter, seq } = report;
    if (reporter !== undefined && seq !== undefined && store.reports.applied(reporter, seq)) return answer;
    let billed = 0;
    // Each bill shrinks the grant it was reserved under, whichever attempt's report carries it.
    const settled = new Map<string, number>();
    for (const bill of report.bills) {
      if (!store.spend.recordBilled(bill)) continue;
      const micros = toMicros(bill.credits);
      billed += micros;
      if (bill.grantOf) settled.set(bill.grantOf, (settled.get(bill.grantOf) ?? 0) + micros);
    }
    for (const [attemptId, micros] of settled) store.spend.settleGrant(attemptId, micros);
    let salvaged = 0;
    for (const entry of report.salvage) if (store.salvage.add(entry)) salvaged++;
    store.addUsage(report.usage);
    for (const { line, code } of report.logs) this.#emit("log.appended", code ? { line, code } : { line });
    // Another invocation's end (sent late, or again) does not free the grant: the same attempt assigned again by this
    // invocation spends under it now. Kept, it is freed by that attempt's own end; but an attempt of an older epoch is
    // assigned again by none (its chunk's next attempts have ids of their own): kept, it held the run below its cap.
    const superseded = report.attemptSeq !== undefined && report.attemptSeq < (store.run()?.runAttempt ?? 0);
    if (report.end && (!earlier || superseded)) store.spend.releaseGrant(report.attemptId);
    const run = store.run();
    if ((billed > 0 || salvaged > 0) && run && isTerminal(run.status)) this.#onLateWork();
    // Recorded once all of it is (a write above that throws has the executor send it again, and it is applied again).
    if (reporter !== undefined && seq !== undefined) store.reports.record(reporter, seq);

    if (!watched) return answer;
    const { rows } = report;
    for (let i = 0; i < rows.started; i++) this.#live.started(watched.map, watched.chunk);
    for (const status of ["completed", "failed", "stopped"] as const)
      for (let i = 0; i < rows[status]; i++) this.#live.settled(watched.map, watched.chunk, status);
    watched.observe(report);
    if (report.end) watched.end(report.end);
    return answer;
  }

  /**
   * The executor is alive. An attempt no invocation waits for (its invocation ended or gave it up; a restart of
   * this object forgets every watch) is told to stop: its chunk is, or will be, redispatched under a newer epoch,
   * and what it does from here is fenced off; it only spends.
   */
  #heard(report: AttemptReport, watched: Watched | undefined): ReportAnswer {
    if (!watched) return { stop: report.end ? null : "no invocation of its run waits for it any more" };
    watched.heardAt = this.#now();
    return { stop: null };
  }
}
