/**
 * What an executor tells its run's coordinator about an attempt, in bulk:
 * about once a second while it runs (rows started and settled, log lines,
 * usage, provider latency, and the outbox of bills and salvage), and once at
 * the end with how it ended. An attempt of a map not yet sized (no latency
 * known: ChunkAssignment.sizing) reports its first latency as soon as its
 * first answer comes, and until then, twice a second, how
 * long its requests have waited. A report also says the executor is alive: the
 * coordinator gives up on an attempt it has not heard from for a lease's
 * length. A report that failed (it may have been applied, its answer lost)
 * is sent again as it was, before anything newer, and the coordinator applies
 * it once (AttemptReport.seq); outbox entries leave the outbox only once a
 * report carrying them was answered.
 */
import type { CoordinatorLink } from "../../clients/executors";
import type { AttemptEnd, AttemptReport, ReportAnswer, UnreportedEnd, UsageDelta } from "../../contracts/executors";
import type { NoticeCode } from "../../api/responses";
import { MAX_LOG_LINE } from "../../contracts/events";
import { messageOf } from "../../core/errors";
import { getOrInsert } from "../../core/collections";
import type { SubrequestMeter } from "../../core/meter";
import type { ExecutorStore } from "../../stores/executor-store";

/** Most outbox entries one report carries... */
const OUTBOX_PER_REPORT = 500;
/** ...and most characters of them past the first (the platform caps an RPC at 32 MiB). */
const OUTBOX_REPORT_CHARS = 6 * 1024 * 1024;
/** Log lines one report carries at most; more are counted and summarized. */
const LOGS_PER_REPORT = 200;
/** While the map is unsized and no request of the attempt has been answered, how often it says how long they waited. */
const WAITING_REPORT_MS = 500;
/**
 * A wait shorter than this is not reported: the first answers come within a
 * report's interval then, and say the latency itself. (The oldest request is
 * the slowest of a burst: at 500 ms its wait sized a map at 17 executors
 * where the answers' latency sizes it at 13.)
 */
const WAITING_MIN_MS = 1_000;

type Counters = AttemptReport["rows"];

/**
 * An executor invocation's meter as its attempts report it: attempts may run
 * side by side on the one meter, so each count goes out in exactly one
 * report, whichever attempt's it is.
 */
export class MeterReports {
  #meter: SubrequestMeter;
  #reported: UsageDelta;

  constructor(meter: SubrequestMeter) {
    this.#meter = meter;
    this.#reported = usageOf(meter);
  }

  /** What the meter counted since the last take. */
  take(): UsageDelta {
    const usage = usageOf(this.#meter);
    const delta = minus(usage, this.#reported);
    this.#reported = usage;
    return delta;
  }
}

export class AttemptReporter {
  #link: CoordinatorLink;
  #store: ExecutorStore;
  #usage: MeterReports;
  #base: Pick<AttemptReport, "executor" | "attemptId" | "attemptSeq" | "invocation" | "map" | "chunk">;
  #rows: Counters = { started: 0, completed: 0, failed: 0, stopped: 0 };
  #logs: AttemptReport["logs"] = [];
  #droppedLogs = 0;
  #latency = new Map<string, { calls: number; totalMs: number }>();
  #draining = false;
  /** The map is unsized (ChunkAssignment.sizing) and no report of this attempt has carried latency yet. */
  #sizing: boolean;
  /** Requests sent and not yet answered, per provider, in the order sent: each one's send time. */
  #waiting = new Map<string, Map<number, number>>();
  #sent = 0;
  #timer: ReturnType<typeof setInterval> | null = null;
  #waitingTimer: ReturnType<typeof setInterval> | null = null;
  #sending: Promise<void> = Promise.resolve();
  /** A report asked for and not yet begun (one is on its way): later asks join it rather than queue behind it. */
  #queued: Promise<void> | null = null;
  #killed = false;
  #onStop: (reason: string) => void;
  /** This reporter, as its reports name it (AttemptReport.reporter), and how many it has made. */
  #id = crypto.randomUUID();
  #seq = 0;
  /** The report sent last, until answered, with where its outbox entries end: sent again before anything newer. */
  #unanswered: { report: AttemptReport; outboxUpTo: number | null } | null = null;
  /** The end was heard: nothing more goes out. */
  #ended = false;

  constructor(options: {
    link: CoordinatorLink;
    store: ExecutorStore;
    usage: MeterReports;
    report: Pick<AttemptReport, "executor" | "attemptId" | "attemptSeq" | "invocation" | "map" | "chunk">;
    /** The coordinator sizes the map by this attempt's first answers (ChunkAssignment.sizing). */
    sizing?: boolean;
    /** The coordinator answered a report saying no invocation waits for the attempt any more (ReportAnswer.stop). */
    onStop?(reason: string): void;
    /** An end an earlier invocation could not report: what it left is sent first ({@link unreported}). */
    unreported?: UnreportedEnd;
  }) {
    this.#sizing = options.sizing ?? false;
    this.#onStop = options.onStop ?? (() => {});
    this.#link = options.link;
    this.#store = options.store;
    this.#usage = options.usage;
    this.#base = options.report;
    const left = options.unreported;
    if (left) {
      this.#logs = [...left.logs];
      const { unanswered } = left;
      if (unanswered) {
        // Its bills and salvage as the outbox still holds them (those another report carried since are applied).
        const outbox = this.#store.outbox(OUTBOX_PER_REPORT, OUTBOX_REPORT_CHARS).filter((e) => e.seq <= (unanswered.outboxUpTo ?? 0));
        const report = {
          ...unanswered.report,
          bills: outbox.flatMap((entry) => (entry.kind === "bill" ? [entry.bill] : [])),
          salvage: outbox.flatMap((entry) => (entry.kind === "salvage" ? [entry.salvage] : [])),
        };
        this.#unanswered = { report, outboxUpTo: outbox.at(-1)?.seq ?? null };
      }
    }
  }

  row(event: "started" | "completed" | "failed" | "stopped"): void {
    this.#rows[event]++;
  }

  log(line: string, code?: NoticeCode): void {
    if (this.#logs.length >= LOGS_PER_REPORT) return void this.#droppedLogs++;
    // Cut here, as the coordinator would: a report carrying a line of megabytes could never be applied.
    const cut = line.slice(0, MAX_LOG_LINE);
    this.#logs.push(code ? { line: cut, code } : { line: cut });
  }

  /** Only its last few rows are left: the coordinator hears it now (see AttemptReport.draining). */
  draining(): void {
    if (this.#draining) return;
    this.#draining = true;
    void this.flush(null).catch(() => {});
  }

  /**
   * A request to `provider` leaves now; call what this returns when it ends: `timed`, its time to the answer is
   * the latency reported; else (it is sent again) it is forgotten.
   */
  sent(provider: string): (timed: boolean) => void {
    const id = this.#sent++;
    const sentAt = Date.now();
    getOrInsert(this.#waiting, provider, () => new Map()).set(id, sentAt);
    if (this.#sizing && this.#latency.size === 0) this.#waitingTimer ??= setInterval(() => this.#reportWaiting(), WAITING_REPORT_MS);
    let ended = false;
    return (timed) => {
      if (ended) return;
      ended = true;
      this.#waiting.get(provider)?.delete(id);
      if (!timed) return;
      const first = this.#sizing && this.#latency.size === 0;
      this.#observe(provider, Date.now() - sentAt);
      // The map runs at its floor until the coordinator hears an answer: the first goes now, not at the next tick
      // (up to a report's interval later: at 500 ms, a third of the map's start).
      if (first) void this.flush(null).catch(() => {});
    };
  }

  #observe(provider: string, ms: number, calls = 1): void {
    const seen = getOrInsert(this.#latency, provider, () => ({ calls: 0, totalMs: 0 }));
    seen.calls += calls;
    seen.totalMs += ms;
    // An answer says more than a wait.
    this.#stopWaiting();
  }

  /** Unsized, and nothing answered yet: how long requests have waited already says what the latency is at least. */
  #reportWaiting(): void {
    if (!this.#sizing || this.#latency.size > 0) {
      this.#stopWaiting();
      return;
    }
    if (this.#oldestWaiting().length > 0) void this.flush(null).catch(() => {});
  }

  #stopWaiting(): void {
    if (this.#waitingTimer) clearInterval(this.#waitingTimer);
    this.#waitingTimer = null;
  }

  /**
   * Reports every `intervalMs` while something happened (rows, bills, log
   * lines), and at least every `heartbeatMs` regardless, until {@link end}.
   */
  start(intervalMs: number, heartbeatMs: number): void {
    let quietSince = Date.now();
    this.#timer = setInterval(() => {
      const busy = this.#hasNews();
      if (!busy && Date.now() - quietSince < heartbeatMs) return;
      quietSince = Date.now();
      void this.flush(null).catch(() => {});
    }, intervalMs);
  }

  #hasNews(): boolean {
    const rows = this.#rows;
    // Latency and bills ride along with the next report: they need no report of their own, but for the first latency
    // of an unsized map (its executors are sized by it, and at 2 s a row's first settle can be 4 s away).
    const firstLatency = this.#sizing && this.#latency.size > 0;
    return firstLatency || this.#unanswered !== null || rows.started + rows.completed + rows.failed + rows.stopped + this.#logs.length > 0;
  }

  /**
   * The attempt wound down and goes on in the executor's next invocation,
   * with a reporter of its own: what happened so far goes now, with no end
   * (not retried: the next reports carry the outbox, and rows counts are live only).
   */
  async suspend(): Promise<void> {
    this.#stopTimers();
    while (this.#store.outboxOverflows(OUTBOX_PER_REPORT, OUTBOX_REPORT_CHARS)) await this.flush(null);
    await this.flush(null);
  }

  #stopTimers(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    this.#stopWaiting();
  }

  /**
   * The last report, with how the attempt ended; retried a few times, as the coordinator must hear it. Throws
   * when it was not heard: {@link unreported} is then what is left to send.
   */
  async end(end: AttemptEnd): Promise<void> {
    this.#stopTimers();
    let failure: unknown = null;
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        // Outbox entries beyond one report go first; the end goes with the last of them.
        while (!this.#ended && this.#store.outboxOverflows(OUTBOX_PER_REPORT, OUTBOX_REPORT_CHARS)) await this.flush(null);
        await this.flush(end);
        return;
      } catch (error) {
        failure = error;
        await new Promise((resolve) => setTimeout(resolve, 100 * 4 ** attempt));
      }
    }
    throw new Error(`could not report the end of ${this.#base.attemptId}: ${messageOf(failure)}`);
  }

  /** What is left to send of `end`, which {@link end} could not report: the executor holds it for the alarm's retry. */
  unreported(end: AttemptEnd): UnreportedEnd {
    const unanswered = this.#unanswered && {
      report: { ...this.#unanswered.report, bills: [], salvage: [] },
      outboxUpTo: this.#unanswered.outboxUpTo,
    };
    const logs = this.#droppedLogs
      ? [...this.#logs, { line: `${this.#droppedLogs} more log lines of this attempt were left out` }]
      : this.#logs;
    return { unanswered, end: unanswered?.report.end ? null : end, logs };
  }

  /** The executor died (test faults): nothing more is reported from this instance. */
  kill(): void {
    this.#killed = true;
    this.#stopTimers();
  }

  /**
   * Sends what happened since the last report (one report at a time). Asked while one is on its way, it is the
   * report that follows, which every ask until it begins joins: a coordinator that stalls is sent one report per
   * attempt when it recovers, not one per tick it was stalled for.
   */
  flush(end: AttemptEnd | null): Promise<void> {
    if (end === null && this.#queued) return this.#queued;
    const next: Promise<void> = this.#sending
      .catch(() => {})
      .then(() => {
        if (this.#queued === next) this.#queued = null;
        return this.#send(end);
      });
    this.#sending = next;
    this.#queued = end === null ? next : null;
    return next;
  }

  async #send(end: AttemptEnd | null): Promise<void> {
    if (this.#killed) throw new Error("this executor instance was aborted");
    if (this.#unanswered) await this.#deliver(this.#unanswered);
    if (this.#ended) return;
    // Counted before the usage is taken, so that the report carries its own call (the last of an invocation would not).
    this.#link.countReport();
    const rows = this.#rows;
    const logs = this.#logs;
    const latency = this.#latency;
    if (this.#droppedLogs) logs.push({ line: `${this.#droppedLogs} more log lines of this attempt were left out` });
    const outbox = this.#store.outbox(OUTBOX_PER_REPORT, OUTBOX_REPORT_CHARS);
    this.#rows = { started: 0, completed: 0, failed: 0, stopped: 0 };
    this.#logs = [];
    this.#droppedLogs = 0;
    this.#latency = new Map();
    const report: AttemptReport = {
      ...this.#base,
      reporter: this.#id,
      seq: ++this.#seq,
      rows,
      logs,
      bills: outbox.flatMap((entry) => (entry.kind === "bill" ? [entry.bill] : [])),
      salvage: outbox.flatMap((entry) => (entry.kind === "salvage" ? [entry.salvage] : [])),
      usage: this.#usage.take(),
      latency: [...latency].map(([provider, seen]) => ({ provider, ...seen })),
      waiting: this.#sizing ? this.#oldestWaiting() : [],
      draining: this.#draining,
      end,
    };
    await this.#deliver({ report, outboxUpTo: outbox.at(-1)?.seq ?? null }, true);
  }

  /**
   * Sends `sent`; until it is answered, it is the report sent next (it may have been applied, its answer lost).
   * `counted`: its call is in its own usage (a first send); a resend's goes in a later report.
   */
  async #deliver(sent: { report: AttemptReport; outboxUpTo: number | null }, counted = false): Promise<void> {
    this.#unanswered = sent;
    const answer = await this.#link.report(sent.report, counted);
    this.#unanswered = null;
    const { report } = sent;
    if (sent.outboxUpTo !== null) this.#store.shipped(sent.outboxUpTo);
    if (report.latency.length > 0) {
      this.#sizing = false;
      this.#stopWaiting();
    }
    if (report.end) this.#ended = true;
    else if (answer.stop) this.#onStop(answer.stop);
  }

  /** Per provider, how long the oldest request still unanswered has waited, if at least {@link WAITING_MIN_MS}. */
  #oldestWaiting(): AttemptReport["waiting"] {
    const now = Date.now();
    const waiting: AttemptReport["waiting"] = [];
    for (const [provider, sent] of this.#waiting) {
      // Kept in the order sent: the first is the oldest.
      for (const sentAt of sent.values()) {
        if (now - sentAt >= WAITING_MIN_MS) waiting.push({ provider, oldestMs: now - sentAt });
        break;
      }
    }
    return waiting;
  }
}

/** The meter's counts as a report carries them. */
export function usageOf(meter: SubrequestMeter): UsageDelta {
  return {
    rpc: meter.rpc,
    provider: meter.provider,
    retries: meter.retries,
    rateLimited: meter.rateLimited,
    lookups: meter.lookups,
    outcomeUnknown: meter.outcomeUnknown,
    rpcByKind: { ...meter.rpcByKind },
  };
}

function minus(a: UsageDelta, b: UsageDelta): UsageDelta {
  return {
    rpc: a.rpc - b.rpc,
    provider: a.provider - b.provider,
    retries: a.retries - b.retries,
    rateLimited: a.rateLimited - b.rateLimited,
    lookups: a.lookups - b.lookups,
    outcomeUnknown: a.outcomeUnknown - b.outcomeUnknown,
    rpcByKind: Object.fromEntries(
      Object.entries(a.rpcByKind)
        .map(([kind, count]) => [kind, count - (b.rpcByKind[kind] ?? 0)] as const)
        .filter(([, count]) => count > 0),
    ),
  };
}
