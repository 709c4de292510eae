import { Server, type Connection, type ConnectionContext } from "partyserver";
import { type ChildAllotment, ChildFinished, type RunSource, type SignalResult, StartRunMessage } from "../contracts/runs";
import { TroupeError, ValidationError } from "../core/errors";
import { ChildWaiters, recordChildEnd } from "../runtime/invocation/child-plays";
import { policyFor } from "../core/policy";
import { deliverSignal, EVENT_KEY, sameDelivery, signalRefusal } from "../runtime/invocation/waits";
import { SubrequestMeter } from "../core/meter";
import { withOutbound, type Outbound, type OutboundGate } from "../core/outbound";
import { outboundGateFor, subrequestCapFor } from "../core/platform-limits";
import { alarmAfter, watchdogAt } from "../runtime/invocation/alarm-watchdog";
import type { DatasetLocation } from "../clients/shards";
import { playRegistry } from "../plays";
import { JournalStore } from "../stores/journal-store";
import { afterOf, LiveFeed, type LiveState, replayEnded } from "../runtime/views/live-feed";
import { type Redactor, redactorFor } from "../runtime/views/redact";
import { driveRun, type RunHost } from "../runtime/invocation/run-driver";
import { recordPlayHistory, reportSpend, spendCapOf } from "../runtime/tools/org-spend";
import { allotToChild, moveAllotment, type SpendLinks } from "../runtime/tools/child-spend";
import { cancelChildren, stopChildren, tellParents } from "../runtime/invocation/run-links";
import { isTerminal } from "../core/statuses";
import { RunStore, type RunRecord } from "../stores/run-store";
import type { LedgerEvent } from "../stores/ledger-store";
import { runMigrations } from "../stores/run-schema";
import { runView, shownStatus, type RunView } from "../runtime/views/run-view";
import { LiveRows } from "../runtime/map/live-rows";
import { ExecutorAttempts } from "../runtime/executor/executor-attempts";
import type { CaptureSource } from "../clients/executors";
import type { AttemptReport, ReportAnswer, SpendGrant } from "../contracts/executors";
import { createSql, migrate } from "../stores/sql";
import { type FaultProbe, faultProbeFor } from "../clients/faults";
import { OrgClient } from "../clients/orgs";
import { toolRegistry } from "../tools";
import type { LedgerEventFields, LedgerEventType } from "../api/responses";

/**
 * Set by the Worker on a live (WebSocket) request it forwards: the org whose token it verified. The coordinator
 * trusts it because only the Worker can reach the coordinator; the Worker overwrites whatever a client sent.
 */
export const VERIFIED_ORG_HEADER = "X-Troupe-Verified-Org";

/** A finished run whose spend report failed tries again after this long. */
const SPEND_REPORT_RETRY_MS = 5_000;
/** A child whose cancel failed is tried again this much later, this many times. */
const CHILD_CANCEL_RETRY_MS = 5_000;
const MAX_CHILD_CANCEL_TRIES = 10;
/** A parent that could not be told of this run's end (or of a spend grown since) is told again this much later, this many times. */
const PARENT_RETELL_RETRY_MS = 5_000;
const MAX_PARENT_RETELL_TRIES = 120;
/** Signals a run keeps that no wait has taken yet; more are refused (`too_many_signals`) unless a wait takes them now. */
export const MAX_OPEN_SIGNALS = 1_000;

/** An alarm invocation under way. */
type AlarmInvocation = { controller: AbortController; wake: boolean };

/** The longest a run may take before it fails with `deadline_exceeded`, and its default limit. */
export const MAX_RUN_TIMEOUT_SECONDS = 24 * 3600;

/**
 * One per run (named by the run id): the run record, chunk plan, attempt
 * epoch, ledger and live watchers. Its alarm drives the run, so an evicted or
 * restarted coordinator resumes by itself. Every read checks the caller's
 * org: another org's run answers `null`, exactly like a missing one.
 *
 * A partyserver `Server` with hibernation: watchers' sockets stay open while
 * the object sleeps, and what each was sent lives in its attachment.
 */
export class RunCoordinator extends Server<Env> {
  static override options = { hibernate: true };

  #store: RunStore;
  /**
   * The alarm invocation under way, from its first line to the arming of the
   * next alarm. While it is set, a wake only raises `wake`: the invocation reads
   * it after its last await, in the same synchronous step that arms the alarm.
   */
  #invocation: AlarmInvocation | null = null;
  #feed: LiveFeed;
  #redactor: Redactor;
  #journal: JournalStore;
  #waiters = new ChildWaiters();
  #live = new LiveRows();
  #executors: ExecutorAttempts;
  /** What each alarm invocation is given of this object. */
  #host: RunHost;
  /** This object's outbound requests (provider calls, fetches): six in flight at most under `PLATFORM_LIMITS=emulate`. */
  #outboundGate: OutboundGate | null;
  /** Children refused more of this run's cap, and when they last asked (runtime/tools/child-spend.ts). */
  #childWaits = new Map<string, number>();
  /** What the run's asks of its parents and answers to its children go through (child-spend.ts). */
  #spendLinks: SpendLinks;
  /** The status this instance last told the org's directory (an alarm tells one it missed: a failed sync). */
  #listed: string | null = null;
  /** The probe of directory syncs (test runner only), one per instance: a probe asks whether faults are armed once. */
  #directoryFaults: FaultProbe | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#outboundGate = outboundGateFor(env);
    // A watcher's heartbeat: the runtime answers it on every hibernatable socket without waking this object.
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
    this.#store = new RunStore({ sql: createSql(ctx.storage), now: Date.now });
    this.#journal = new JournalStore({ sql: createSql(ctx.storage), now: Date.now });
    this.#redactor = redactorFor(env);
    this.#spendLinks = { env, store: this.#store, journal: this.#journal, wake: () => this.#wake() };
    this.#feed = new LiveFeed({
      events: (after, limit) => this.#store.ledger.events(after, limit),
      snapshot: () => ({ run: this.#view()!, seq: this.#store.ledger.lastSeq() }),
    });
    this.#executors = new ExecutorAttempts({
      store: this.#store,
      live: this.#live,
      emit: (type, data) => this.#emit(type, data),
      now: Date.now,
      // A bill that reaches an ended run: its next alarm reports it to the org's day (salvage: writes it back).
      onLateWork: () => void this.ctx.storage.setAlarm(Date.now()),
    });
    this.#host = {
      env,
      executors: this.#executors,
      store: this.#store,
      journal: this.#journal,
      waiters: this.#waiters,
      live: this.#live,
      plays: playRegistry(env),
      tools: toolRegistry(env),
      emit: (type, data) => this.#emit(type, data),
      now: Date.now,
      redact: (value) => this.#redactor.redactDeep(value),
      onStatus: () => this.#syncDirectory(),
      reportSpend: () => reportSpend(this.env, this.#store),
    };
    ctx.blockConcurrencyWhile(async () => migrate(ctx.storage, runMigrations));
  }

  /** Records the run and arms the alarm; idempotent for the same run id. */
  async start(request: StartRunMessage): Promise<RunView> {
    const init = StartRunMessage.parse(request);
    const now = Date.now();
    const deadlineAt = now + (init.timeoutSeconds ?? MAX_RUN_TIMEOUT_SECONDS) * 1000;
    const testPolicy = this.env.TROUPE_TEST_MODE === "on" ? init.testPolicy : undefined;
    const created = this.#store.create(
      { ...init, deadlineAt, testPolicy, maxSpend: init.maxSpend ?? null, retryUnknown: init.retryUnknown ?? false },
      init.input,
    );
    // A child of a capped run spends from its parent's cap, from its first request on.
    if (created && init.spendFromParent) this.#store.spend.setParentAllotment(0);
    // A parent (the first, or another run of the same child identity) is told when this run ends.
    if (init.parentRunId !== null && !isTerminal(this.#store.run()!.status)) this.#journal.addWatcher(init.parentRunId);
    if (created) {
      // Listed now if the directory answers, else by the alarm's first status: a failure here must not leave a run
      // that never runs (its alarm unset) while the client, told 5xx, starts another.
      await this.#syncDirectory().catch((error: unknown) =>
        console.warn(`run ${init.runId}: could not list it in its org's directory yet`, error),
      );
      await this.ctx.storage.setAlarm(now);
    }
    return this.#view()!;
  }

  /**
   * Delivers `data` to the play's `ctx.waitForEvent(eventKey)`: the oldest
   * wait on the key takes it now (and the run is woken), or it is kept for
   * the next one. With `dedupeKey`, a repeated delivery is dropped.
   */
  async signal(org: string, eventKey: string, data: unknown, dedupeKey: string | null): Promise<SignalResult> {
    const run = this.#runOf(org);
    if (!run) return { outcome: "not_found" };
    // A retry of a delivery gets the first answer, even once the signal has ended the run.
    const earlier = dedupeKey === null ? null : this.#journal.signalByDedupeKey(dedupeKey);
    if (earlier && !sameDelivery(earlier, eventKey, data)) return { outcome: "key_reused", eventKey: earlier.eventKey };
    if (earlier) return { outcome: "accepted", status: shownStatus(run), consumed: earlier.consumed, duplicate: true };
    // A run being cancelled (or carrying out an end it decided, or past its runtime limit) would take the signal and end without it.
    const why = signalRefusal(run, this.#ending(), Date.now());
    if (why) return { outcome: "finished", status: shownStatus(run), why };
    if (!EVENT_KEY.test(eventKey)) throw new ValidationError(`event key ${JSON.stringify(eventKey)} must match ${EVENT_KEY.source}`);
    // Each is kept (up to 64 KiB) until a wait takes it: a sender posting to a key the play never waits on stops here.
    const open = this.#journal.openSignals();
    if (open >= MAX_OPEN_SIGNALS && !this.#journal.waitingFor(eventKey, Date.now())) return { outcome: "full", open };
    const { consumedBy, duplicate } = deliverSignal(this.#journal, eventKey, data, dedupeKey, Date.now());
    if (!duplicate) this.#emit("signal.received", { eventKey, consumedBy });
    if (consumedBy) {
      this.#emit("wait.finished", { kind: "event", key: consumedBy, eventKey, outcome: "signal" });
      await this.#wake();
    }
    return { outcome: "accepted", status: shownStatus(this.#store.run()!), consumed: consumedBy !== null, duplicate };
  }

  /** A child run ended (told by the child's coordinator): record it and wake the play. Idempotent. */
  async childFinished(message: ChildFinished): Promise<void> {
    const end = ChildFinished.parse(message);
    const run = this.#store.run();
    // What a child this run allotted some of its cap spent replaces its allotment (counted even once this run ended);
    // an ended run whose spend grew so tells its own parent again, by its alarm.
    const counted = run && this.#store.spend.childToldEnd(end);
    if (counted && isTerminal(run.status)) await this.ctx.storage.setAlarm(Date.now());
    if (!run || isTerminal(run.status)) return;
    const ended = recordChildEnd(
      this.#journal,
      { ...end, error: end.error ? { code: end.error.code, message: end.error.message } : null },
      (type, data) => this.#emit(type, data),
    );
    this.#waiters.notify(end.childRunId);
    if (ended > 0) await this.#wake();
  }

  /** A child of this run asks for more of its spend cap (runtime/tools/child-spend.ts): what the child may spend in all. */
  async allotChildSpend(org: string, childRunId: string, wantedMicros: number, needMicros: number): Promise<ChildAllotment> {
    if (!this.#runOf(org)) return { micros: 0, wait: false };
    const micros = (n: number) => (Number.isSafeInteger(n) && n > 0 ? n : 0);
    return allotToChild(this.#spendLinks, childRunId, micros(wantedMicros), micros(needMicros), this.#childWaits, Date.now());
  }

  /** A child this run allotted some of its cap moved to another's, or ended once this run gave it up: what it spent of it. */
  async childSpendMoved(org: string, childRunId: string, spentMicros: number, provisional = false): Promise<void> {
    const run = this.#runOf(org);
    const valid = Number.isSafeInteger(spentMicros) && spentMicros >= 0;
    // Counted as a child's end is (an ended run tells its own parent again, by its alarm).
    const counted = run && valid && this.#store.spend.childSpent(childRunId, spentMicros, provisional === true);
    if (counted && isTerminal(run.status)) await this.ctx.storage.setAlarm(Date.now());
  }

  /** An executor of this run asks what the invocation of epoch `attemptSeq` had done (null once it has ended). */
  async captureSource(attemptSeq: number, known?: string): Promise<CaptureSource | "unchanged" | null> {
    return this.#executors.source(attemptSeq, known);
  }

  /** An executor reports on an attempt (executor-attempts.ts applies it), and hears whether to stop it. */
  async attemptReport(report: AttemptReport): Promise<ReportAnswer> {
    return this.#executors.apply(report);
  }

  /** An executor's attempt asks for spend under the run's cap. */
  async grantSpend(attemptId: string, wantedMicros: number): Promise<SpendGrant> {
    return this.#executors.grant(attemptId, wantedMicros);
  }

  /** The run as its org sees it: its alarm armed if it has not ended, or its end told to its org's list first. */
  async getRun(org: string): Promise<RunView | null> {
    const run = this.#runOf(org);
    if (!run) return null;
    if (!isTerminal(run.status) && !this.#invocation && (await this.ctx.storage.getAlarm()) === null)
      await this.ctx.storage.setAlarm(Date.now());
    // The alarm ending a run tells the list last: a reader who sees the end finds it listed (a failure is the alarm's).
    else if (isTerminal(run.status) && this.#listed !== shownStatus(run)) await this.#syncDirectory().catch(() => {});
    return this.#view();
  }

  /**
   * Stops new provider calls at once and ends the run `cancelled` (by the alarm, which releases leases); a run carrying
   * out an end it decided (its play returned, or failed) ends so. `parentRunId`: a parent that started this run cancels
   * it (it failed, was cancelled, or stopped waiting): it is told only its spend, and the run goes on while another parent
   * still waits on it (the same call of theirs), spending from its cap if it spent from this one's (moveAllotment).
   */
  async cancel(org: string, parentRunId?: string): Promise<RunView | null> {
    const run = this.#runOf(org);
    if (!run) return null;
    if (parentRunId !== undefined) {
      this.#journal.markGaveUp(parentRunId);
      const [waiting] = this.#journal.unnotifiedWatchers();
      if (waiting !== undefined) return moveAllotment(this.#spendLinks, parentRunId, waiting).then(() => this.#view());
    }
    if (!isTerminal(run.status) && !this.#ending()) {
      this.#store.requestCancel();
      this.#invocation?.controller.abort(new TroupeError("cancelled", "the run was cancelled"));
      await this.#wake();
      await stopChildren({ env: this.env, store: this.#store, journal: this.#journal });
      // The org's list says so at once (the alarm that ends the run tells it again); a failure here is the alarm's to mend.
      await this.#syncDirectory().catch(() => {});
    }
    return this.#view();
  }

  /** The play and input of the run, for a rerun; null for another org's or a missing run. */
  async source(org: string): Promise<RunSource | null> {
    const run = this.#runOf(org);
    if (!run) return null;
    return {
      play: run.play,
      inputJson: this.#store.inputJson(),
      force: run.force,
      forceToolRefresh: run.forceToolRefresh,
      timeoutSeconds: Math.min(MAX_RUN_TIMEOUT_SECONDS, Math.max(1, Math.round((run.deadlineAt - run.createdAt) / 1000))),
      status: (run.status === "cancelled" || run.status === "failed") && this.#cancellingChildren() ? "cancelling" : shownStatus(run),
    };
  }

  /**
   * A cancelled or failed run is still cancelling children it started (a rerun now
   * would take a child it is about to cancel, and the rerun's rows waiting on
   * it would fail `child_cancelled`), unless its alarm has given up on them.
   */
  #cancellingChildren(): boolean {
    return this.#journal.waitingChildren().length > 0 && this.#journal.counter("child_cancel_tries") <= MAX_CHILD_CANCEL_TRIES;
  }

  async events(org: string, after: number, limit: number): Promise<{ events: LedgerEvent[]; nextCursor: number } | null> {
    const run = this.#runOf(org);
    if (!run) return null;
    const events = this.#store.ledger.events(after, limit);
    return { events, nextCursor: events.length ? events[events.length - 1]!.seq : after };
  }

  /** Where a dataset of this run lives, for paged reads straight from its shards. */
  async dataset(org: string, name: string): Promise<{ location: DatasetLocation; total: number } | null> {
    const run = this.#runOf(org);
    if (!run) return null;
    const map = this.#store.map(name);
    if (!map) return null;
    return { location: { org: run.org, play: run.play, dataset: name, shardCount: map.shardCount }, total: map.total };
  }

  /**
   * Live watchers: the Worker has authenticated the request and names the org
   * in {@link VERIFIED_ORG_HEADER}; anything else is refused before the upgrade.
   */
  override async fetch(request: Request): Promise<Response> {
    const run = this.#runOf(request.headers.get(VERIFIED_ORG_HEADER));
    if (!run) return Response.json({ error: { code: "run_not_found", message: "no such run in this org" } }, { status: 404 });
    if (request.headers.get("Upgrade")?.toLowerCase() !== "websocket") {
      return Response.json({ error: { code: "upgrade_required", message: "connect with Upgrade: websocket" } }, { status: 426 });
    }
    if (isTerminal(run.status)) return replayEnded(this.#feed, request);
    return super.fetch(request);
  }

  /**
   * A watcher closed its socket. One that closed without a code (1005) is
   * answered with 1000: partyserver answers only sendable codes, and a close
   * left unanswered keeps the client waiting for its handshake.
   */
  override async webSocketClose(ws: WebSocket, code: number, reason: string, wasClean: boolean): Promise<void> {
    await super.webSocketClose(ws, code === 1005 ? 1000 : code, reason, wasClean);
  }

  /** A watcher connected: the snapshot and the ledger after `?after=` (default 0: all of it). */
  override onConnect(connection: Connection<LiveState>, ctx: ConnectionContext): void {
    this.#feed.open(connection, afterOf(ctx.request.url));
  }

  /** Whether an alarm invocation is under way (a test that runs an alarm itself waits for none to be). */
  get invoking(): boolean {
    return this.#invocation !== null;
  }

  /** Which retry of a failed alarm this is (partyserver's `onAlarm` is not told). */
  #alarmRetry = 0;

  override async alarm(info?: AlarmInvocationInfo): Promise<void> {
    this.#alarmRetry = info?.retryCount ?? 0;
    await super.alarm();
  }

  override async onAlarm(): Promise<void> {
    if (this.#invocation) {
      // Another invocation is under way: it arms the next alarm when it ends.
      this.#invocation.wake = true;
      return;
    }
    const invocation = { controller: new AbortController(), wake: false };
    this.#invocation = invocation;
    let next: number | null = null;
    let failed = true;
    // Set first: an invocation the platform kills runs no `finally` (alarm-watchdog.ts).
    const ended = isTerminal(this.#store.run()?.status ?? "completed");
    const watchdog = ended ? null : watchdogAt(this.#journal, Date.now());
    try {
      if (watchdog !== null) await this.ctx.storage.setAlarm(watchdog);
      next = await withOutbound(this.#outbound(), () => this.#invoke(invocation));
      failed = false;
    } finally {
      // No await between reading the wake and arming: a wake from here on finds no invocation and arms the alarm itself.
      this.#invocation = null;
      const run = this.#store.run();
      const terminal = isTerminal(run?.status ?? "completed");
      const retryCount = run === null ? 0 : this.#alarmRetry;
      const at = alarmAfter(this.#journal, { failed, wake: invocation.wake, terminal, next, watchdog, retryCount }, Date.now());
      if (typeof at === "number") await this.ctx.storage.setAlarm(at);
      // Cleared unless something armed another meanwhile (a child's late spend of an ended run): input gates hold
      // other events while storage answers, so none arms one between the read and the delete.
      else if (at === "clear" && (await this.ctx.storage.getAlarm()) === watchdog) await this.ctx.storage.deleteAlarm();
    }
  }

  /** One alarm invocation: drives the run, then tells its children and parents. Returns when the alarm should fire next. */
  async #invoke(invocation: AlarmInvocation): Promise<number | null> {
    const meter = new SubrequestMeter({ cap: subrequestCapFor(this.env) });
    // Test runner only: a `crash` fault kills this invocation the way an eviction would.
    const faults = faultProbeFor(this.env, { crash: (reason) => this.#crash(reason), play: this.#store.run()?.play });
    let next: number | null;
    const run = this.#store.run();
    // A status the directory missed (a new run's listings failed, and no status change since tells it): told now.
    if (run && this.#listed !== shownStatus(run)) await this.#syncDirectory().catch(() => {});
    const start = {
      cancel: invocation.controller.signal,
      policy: policyFor(this.env, run?.testPolicy),
      meter,
      faults,
      spend: await spendCapOf(this.env, this.#spendLinks),
    };
    try {
      next = await driveRun(this.#host, start);
    } finally {
      this.#store.addUsage(meter);
    }
    // Between driving and re-arming: a failure here leaves the alarm to the runtime's retry.
    await faults.check("run.alarm");
    const links = {
      env: this.env,
      store: this.#store,
      journal: this.#journal,
      faults,
      log: (line: string) => this.#emit("log.appended", { line }),
    };
    // Once an ended run's (the alarm that ended it may have failed past its end: its directory call, say).
    if (isTerminal(this.#store.run()?.status ?? "queued") && this.#journal.counter("play_history") === 0) {
      await recordPlayHistory(this.env, this.#store);
      this.#journal.bump("play_history");
    }
    // Whether or not this alarm ended the run: one that died mid-way through its end, or a child's cancel that failed, left
    // children running, and they would run to their own limits.
    if ((await cancelChildren(links)) > 0 && this.#journal.bump("child_cancel_tries") <= MAX_CHILD_CANCEL_TRIES)
      next = Math.min(next ?? Infinity, Date.now() + CHILD_CANCEL_RETRY_MS);
    // A parent not told of this run's end and spend (or that the spend grew after it) is told again shortly, a bounded number of times.
    if ((await tellParents(links)) === 0) this.#journal.resetCounter("parent_retell_tries");
    else if (this.#journal.bump("parent_retell_tries") <= MAX_PARENT_RETELL_TRIES)
      next = Math.min(next ?? Infinity, Date.now() + PARENT_RETELL_RETRY_MS);
    // A report that could not be made is made by a later alarm, even once the run has ended. Made, what this
    // invocation held of the org's daily limit is in the day's total: the hold ends.
    if (!(await reportSpend(this.env, this.#store))) next = Math.min(next ?? Infinity, Date.now() + SPEND_REPORT_RETRY_MS);
    else if (run) await start.spend.release(this.env, run.runId, run.org).catch(() => {});
    // Last, after children, parents and spend: an ended run's listing that failed fails the alarm, whose retry tells it.
    const ended = this.#store.run()!;
    if (isTerminal(ended.status) && this.#listed !== shownStatus(ended)) await this.#syncDirectory();
    return next;
  }

  /** Who this object's outbound requests come from (`RunCoordinator:<runId>`), and the gate they pass. */
  #outbound(): Outbound {
    return { caller: `RunCoordinator:${this.#store.run()?.runId ?? this.ctx.id.toString()}`, gate: this.#outboundGate };
  }

  /** Aborts this object (test faults only): every invocation in flight dies, and the object restarts from storage. */
  #crash(reason: string): never {
    this.ctx.abort(reason);
    throw new Error(reason);
  }

  /** The run carries out an end it decided (its play's, stored as the play decided it: invocation.ts). */
  #ending(): boolean {
    return this.#store.ending() !== null;
  }

  /** Drives the run again at once (after the current invocation, if one is running). */
  async #wake(): Promise<void> {
    if (this.#invocation) this.#invocation.wake = true;
    else if (!isTerminal(this.#store.run()?.status ?? "completed")) await this.ctx.storage.setAlarm(Date.now());
  }

  /** The run as its org sees it (API.md `GET /v1/runs/<id>`), links to the datasets its play declares included. */
  #view(): RunView | null {
    const play = this.#store.run()?.play;
    return runView(this.#store, (play && playRegistry(this.env).get(play)?.datasets) || [], this.#live);
  }

  /** The run, when `org` owns it: every entry point that answers an org asks here first (another org's run is not found). */
  #runOf(org: string | null): RunRecord | null {
    const run = this.#store.run();
    return run && org !== null && run.org === org ? run : null;
  }

  /** Every ledger append goes through here: redacted, stored, then sent to live watchers. */
  #emit<Type extends LedgerEventType>(type: Type, data: LedgerEventFields[Type]): void {
    const event = this.#store.ledger.append(type, this.#redact(type, data));
    try {
      this.#feed.publish(event, this.getConnections<LiveState>());
    } catch (error) {
      // The event is in the ledger; a watcher that missed it catches up from there on its next event or reconnect.
      console.error(`could not publish event ${event.seq} (${type}) to live watchers`, error);
    }
  }

  /** Log lines may quote credentials: redact them before they are stored or sent (run errors are redacted by the driver). */
  #redact<Type extends LedgerEventType>(type: Type, data: LedgerEventFields[Type]): LedgerEventFields[Type] {
    if (type === "log.appended") {
      const { line } = data as LedgerEventFields["log.appended"];
      return { ...data, line: this.#redactor.redact(line) };
    }
    return data;
  }

  async #syncDirectory(): Promise<void> {
    const run = this.#store.run()!;
    this.#directoryFaults ??= faultProbeFor(this.env, { play: run.play });
    await this.#directoryFaults.check("directory.sync");
    const status = shownStatus(run);
    const { runId, play, parentRunId, createdAt, updatedAt } = run;
    await new OrgClient({ env: this.env, org: run.org }).record({ runId, play, status, parentRunId, createdAt, updatedAt });
    this.#listed = status;
  }
}
