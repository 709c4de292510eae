/**
 * One alarm invocation of a run. Built once per alarm, it carries what every
 * part of the runtime needs for this invocation ({@link InvocationScope}) and
 * runs the play once, from the top (completed work comes back from storage
 * without cost), to one {@link InvocationEnd}.
 */
import { rowSchemaOf } from "../../play/define";
import type { FaultProbe } from "../../clients/faults";
import { messageOf, TerminalError, TroupeError } from "../../core/errors";
import type { SubrequestMeter } from "../../core/meter";
import type { RuntimePolicy } from "../../core/policy";
import { type Emit, type Log, MAX_LOG_LINE } from "../../contracts/events";
import type { AnyTool, PlayDefinition } from "../../play/types";
import type { JournalStore } from "../../stores/journal-store";
import type { RunError, RunRecord, RunStore } from "../../stores/run-store";
import type { LiveRows } from "../map/live-rows";
import type { CaptureSource } from "../../clients/executors";
import type { SpendGrant } from "../../contracts/executors";
import type { ExecutorAttempts } from "../executor/executor-attempts";
import { sourceOverBudget } from "../executor/capture-sources";
import { EffectTrace } from "./effect-trace";
import { MapRunner } from "../map/map-runner";
import { createDispatchServices } from "../tools/services";
import type { SpendLedger } from "../tools/spend";
import type { InvocationSpendCap } from "../tools/org-spend";
import { capsItsChildren } from "../tools/child-spend";
import { ChildPlays, type ChildWaiters } from "./child-plays";
import { decideEnd } from "./decided-end";
import { endAfterReturn, endAfterThrow, type InvocationEnd, withMapsStopped } from "./invocation-end";
import { type PlayServices, playCalls, RunContext } from "./play-context";
import { stopChildren } from "./run-links";
import { PlayFetch, SecretValues } from "./play-fetch";
import type { InvocationScope } from "./scope";
import { WaitSignal, Waits, waitPolicyFor } from "./waits";
import type { YieldSignal } from "./yield";

/** What a coordinator gives each of its invocations: built once, with the coordinator. */
export interface RunHost {
  env: Env;
  store: RunStore;
  /** The run's waits: child plays, events, sleeps, signals. */
  journal: JournalStore;
  /** In-process waits of rows for their children's messages. */
  waiters: ChildWaiters;
  plays: ReadonlyMap<string, PlayDefinition>;
  tools: ReadonlyMap<string, AnyTool>;
  /** Rows of the chunks running in this object, as they settle (the progress counts them at once). */
  live: LiveRows;
  /** The run's executors' reports, and what they ask of the running invocation. */
  executors: ExecutorAttempts;
  /** Appends to the ledger (and tells watchers). */
  emit: Emit;
  now(): number;
  /** Removes secrets a failure message may quote, before the run's error is stored. */
  redact<T>(value: T): T;
  /** The run's status changed: tell the org's directory. */
  onStatus(): Promise<void>;
  /**
   * Adds what the run billed to its org's day, before the run shows as ended:
   * whoever sees it ended sees its spend in the org's totals and daily limit.
   * False when the org could not be told now (a later alarm tells it).
   */
  reportSpend(): Promise<boolean>;
}

/** What one alarm brings: its cancel, its meter and faults, and the caps it runs under. */
export interface InvocationStart {
  /** Aborted by the coordinator when the run is cancelled. */
  cancel: AbortSignal;
  policy: RuntimePolicy;
  meter: SubrequestMeter;
  /** The test-only fault seam (the coordinator's can crash it). */
  faults: FaultProbe;
  /** The caps the run spends under in this invocation: its `maxSpend`, and what it holds of the org's daily limit. */
  spend: InvocationSpendCap;
}

const MAX_INFRA_RETRIES = 6;

export class Invocation implements InvocationScope {
  readonly host: RunHost;
  readonly env: Env;
  readonly store: RunStore;
  readonly journal: JournalStore;
  readonly run: RunRecord;
  readonly policy: RuntimePolicy;
  readonly meter: SubrequestMeter;
  readonly faults: FaultProbe;
  readonly emit: Emit;
  readonly now: () => number;
  readonly signal: AbortSignal;
  /** The secret header values this invocation's fetches sent: redacted from its log lines, rows' errors and its own. */
  readonly secrets = new SecretValues();
  readonly #start: InvocationStart;
  /** The journal's entries settled as this invocation began: its play sees those, and maybe later ones. */
  readonly settlesAtStart: number;
  /** A row whose child runs long stops this invocation the way a cancel would, except that the run goes on (waiting). */
  readonly #suspension = new AbortController();
  /** The runtime limit holds inside an invocation too: at the deadline the run stops as a cancel would, then fails. */
  readonly #limit = new AbortController();
  /** The play has ended: what it left running (a map of a `Promise.all` another map failed) stops as a cancel would. */
  readonly #ended = new AbortController();
  #inputJson: string | null = null;

  constructor(host: RunHost, start: InvocationStart, run: RunRecord) {
    this.host = host;
    this.env = host.env;
    this.store = host.store;
    this.journal = host.journal;
    this.emit = host.emit;
    this.now = host.now;
    this.run = run;
    this.policy = start.policy;
    this.meter = start.meter;
    this.faults = start.faults;
    this.#start = start;
    this.settlesAtStart = host.journal.settles();
    this.signal = AbortSignal.any([start.cancel, this.#suspension.signal, this.#limit.signal, this.#ended.signal]);
  }

  log: Log = (line, code) => {
    this.emit("log.appended", { line: line.slice(0, MAX_LOG_LINE), ...(code ? { code } : {}) });
  };

  /** Whether a cancel was asked for: the coordinator aborted this invocation, or the run records the request. */
  get cancelled(): boolean {
    return this.#start.cancel.aborted || this.store.run()!.cancelRequested;
  }

  /** Runs the play from the top, once; the invocation's pacers are released before it answers. */
  async play(play: PlayDefinition): Promise<InvocationEnd> {
    const timer = setTimeout(
      () => {
        this.#limit.abort(new TroupeError("deadline_exceeded", deadlineExceeded(this.run).message));
        // The run ends failed: its children stop spending now, not once it has wound down (as a cancel's do).
        stopChildren({ env: this.env, store: this.store, journal: this.journal }).catch(() => {});
      },
      Math.max(0, this.run.deadlineAt - this.now()),
    );
    // Tells this invocation's play-level calls from those an earlier one left (owner-liveness.ts).
    const invocation = crypto.randomUUID().slice(0, 8);
    const dispatch = createDispatchServices(this, {
      invocation,
      tools: this.host.tools,
      // Synchronous, in the coordinator's own storage: billed data is durable before the call's error propagates.
      salvage: (entry) => this.store.salvage.add(entry),
      spend: spendLedger(this.store, this.#start.spend),
    });
    const services = this.#playServices();
    const trace = new EffectTrace();
    const maps = new MapRunner({
      scope: this,
      store: this.store,
      tools: this.host.tools,
      dispatch,
      live: this.host.live,
      executors: this.host.executors,
      rowSchema: rowSchemaOf(play.input),
      secrets: services.secrets,
      sourceOverBudget: () => this.#sourceOverBudget(trace),
    });
    const calls = playCalls(this, maps, () => this.store.run()!.runAttempt, invocation);
    const ctx = new RunContext({ scope: this, maps, calls, services, trace });
    const close = this.host.executors.open({
      source: (attemptSeq) => this.#captureSource(attemptSeq, trace),
      grant: (attemptId, wantedMicros) => this.#grant(attemptId, wantedMicros),
    });
    try {
      await services.children.checkDue();
      const end = await this.#run(play, ctx, services, maps);
      // Stored before what the play left running ends (below): a cancel then changes nothing (it would stop children for
      // a run that ends so), and an invocation that dies meanwhile leaves the next to carry it out, not to run the play.
      if (end.kind === "completed" || end.kind === "failed" || end.kind === "cancelled")
        decideEnd(this.store, end, (value) => this.secrets.redactDeep(value));
      return maps.running.length > 0 ? withMapsStopped(end) : end;
    } finally {
      // The play has ended: a limit passing from here on (while its calls end) must not cancel children it left.
      clearTimeout(timer);
      // Nor a map: one left running spent after the run's end (a failed run's), or beside the next invocation (a
      // yield's), which took its live attempts for dead ones. It stops, its calls in flight stored, before the end.
      this.#ended.abort(new TroupeError("invocation_ended", "the play's invocation ended while this map ran"));
      await maps.idle();
      // No play-level call outlives its invocation: the next one's replay would take its receipt for a dead owner's.
      await calls.end();
      close();
      await dispatch.pacers.closeAll();
    }
  }

  async #run(play: PlayDefinition, ctx: RunContext, services: PlayServices, maps: MapRunner): Promise<InvocationEnd> {
    try {
      // A call that must wait (a wait or sleep not come, a child still running) never settles in the play: the invocation
      // ends here once the play can go on only through such calls (its other calls beside them settled first).
      const stalled = services.waits.held.catch(async (signal: unknown) => {
        await ctx.stalled(services.waits);
        throw signal;
      });
      stalled.catch(() => {});
      const result = await Promise.race([play.run(ctx, this.store.input()), stalled]);
      // A play that caught a map's yield (or its cancel, its infrastructure failure) and returned has not ended.
      if (maps.interrupted !== null) throw maps.interrupted;
      // Nor one that caught its run's cancel or runtime limit (a play-level call refused by it) and returned.
      if (this.cancelled || this.#limit.signal.aborted)
        throw new TroupeError("cancelled", "the play returned after its run was stopped; it ends as the stop says");
      // Nor one that returned while a map it did not await still ran: its rows would stop half done, the run complete.
      const running = maps.running;
      if (running.length > 0) {
        throw new TerminalError(
          "map_not_awaited",
          `the play returned while its map ${running.map((name) => JSON.stringify(name)).join(", ")} still ran: await each ctx.map (the rows it completed are kept, and a rerun goes on from them)`,
        );
      }
      await services.children.idle();
      return endAfterReturn(result, services.waits.parked?.resumeAt ?? null);
    } catch (error) {
      // Child submits still in flight are answered (and recorded) before the invocation ends.
      await services.children.idle();
      const suspended = this.#suspension.signal;
      return endAfterThrow(error, {
        cancelled: this.cancelled,
        deadline: this.#limit.signal.aborted ? deadlineExceeded(this.store.run()!) : null,
        suspendedUntil: suspended.aborted ? (suspended.reason as YieldSignal).resumeAt : null,
        parkedUntil: services.waits.parked?.resumeAt ?? null,
        retryAt: () => {
          const failures = this.store.noteInfraFailure(false);
          if (failures > MAX_INFRA_RETRIES) return null;
          this.log(`retrying after an infrastructure error (${failures}/${MAX_INFRA_RETRIES}): ${messageOf(error)}`);
          return this.now() + Math.min(30_000, 250 * 2 ** failures);
        },
      });
    }
  }

  /** Asks the children whose check has come how they are doing, without running the play (ChildPlays.checkDue). */
  async checkChildren(): Promise<void> {
    await this.#playServices().children.checkDue();
  }

  /** What an executor of this invocation needs to run the play up to a map (runtime/executor/capture.ts). */
  #captureSource(attemptSeq: number, trace: EffectTrace): CaptureSource | null {
    const run = this.store.run()!;
    if (run.runAttempt !== attemptSeq) return null;
    // One copy per invocation, however many executors ask.
    this.#inputJson ??= this.store.inputJson();
    const maps = this.store.doneMaps().map((map) => ({ ...map, ...this.store.progress(map.name) }));
    return {
      runAttempt: attemptSeq,
      run,
      inputJson: this.#inputJson,
      policy: this.policy,
      effects: trace.snapshot(),
      maps: maps.map(({ name, total, completed, failed, duplicatesDropped, shardCount }) => ({
        name,
        total,
        completed,
        failed,
        duplicatesDropped,
        shardCount,
      })),
      spendCapped: this.#start.spend.capped,
    };
  }

  /** Why this invocation's capture source cannot be sent to executors now, or null (capture-sources.ts). */
  #sourceOverBudget(trace: EffectTrace): string | null {
    this.#inputJson ??= this.store.inputJson();
    return sourceOverBudget(this.#inputJson, trace.snapshot(), this.policy.sourceBudgetBytes);
  }

  /** Spend for an executor's attempt under this invocation's caps; 0 granted says a cap is reached. */
  #grant(attemptId: string, wantedMicros: number): Promise<SpendGrant> {
    return this.#start.spend.grant(attemptId, wantedMicros);
  }

  /** Child plays, waits and fetch for this invocation. */
  #playServices(): PlayServices {
    const waits = new Waits({ journal: this.journal, now: this.now, emit: this.emit, deadlineAt: this.run.deadlineAt });
    const secrets = this.secrets;
    const children = new ChildPlays({
      scope: this,
      journal: this.journal,
      plays: this.host.plays,
      policy: waitPolicyFor(this.env, this.run.testPolicy),
      waiters: this.host.waiters,
      waits,
      capped: capsItsChildren(this.store),
      stopping: () => this.cancelled || this.#limit.signal.aborted,
      suspend: (resumeAt, reason) => {
        if (!this.#suspension.signal.aborted) {
          this.log(`${reason}: this invocation yields; the map goes on when the child ends`, "invocation_suspended");
          this.#suspension.abort(new WaitSignal(resumeAt, reason));
        }
        return this.#suspension.signal.reason as Error;
      },
    });
    return {
      children,
      waits,
      secrets,
      journal: this.journal,
      suspended: this.#suspension.signal,
      egress: new PlayFetch({ env: this.env, org: this.run.org, signal: this.signal, secrets, meter: this.meter }),
    };
  }
}

/** The run's error at its runtime limit: a failure that says so, not a cancel. */
export function deadlineExceeded(run: RunRecord): RunError {
  const limitS = Math.round((run.deadlineAt - run.createdAt) / 1000);
  return {
    code: "deadline_exceeded",
    message: `the run hit its runtime limit of ${limitS} s (timeoutSeconds) at ${new Date(run.deadlineAt).toISOString()} and was stopped; rows completed so far are kept, and a rerun resumes the rest`,
  };
}

/** The run's ledger of billable requests, over its coordinator's storage, under the invocation's caps. */
function spendLedger(store: RunStore, caps: InvocationSpendCap): SpendLedger {
  return {
    reserve: (request, signal) => caps.reserve(request, signal),
    bill: (requestKey) => store.spend.bill(requestKey),
    release: (requestKey) => store.spend.release(requestKey),
    recordBilled: (request) => store.spend.recordBilled(request),
  };
}
