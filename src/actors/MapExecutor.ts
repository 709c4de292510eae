import { DurableObject } from "cloudflare:workers";
import { CoordinatorLink } from "../clients/executors";
import { faultProbeFor } from "../clients/faults";
import type { AttemptEnd, ChunkAssignment, ChunkSweepAssignment, ChunkSweepResult } from "../contracts/executors";
import { messageOf, TroupeError } from "../core/errors";
import { SubrequestMeter } from "../core/meter";
import { type OutboundGate, withOutbound } from "../core/outbound";
import { lateAlarmRetryAt, MAX_SUBREQUESTS_PER_INVOCATION, outboundGateFor, subrequestCapFor } from "../core/platform-limits";
import { playRegistry } from "../plays";
import { AttemptReporter, MeterReports, usageOf } from "../runtime/executor/attempt-reporter";
import { PacerRegistry } from "../runtime/pacing/pacers";
import { HANDED_BACK, handedBack, runAttempt, runSweep, stoppedUnstarted } from "../runtime/executor/attempt-runner";
import { WindDown } from "../runtime/executor/wind-down";
import { CaptureSources } from "../runtime/executor/capture-sources";
import { policyFor } from "../core/policy";
import { EXECUTOR_MIGRATIONS, ExecutorStore, type HeldAssignment } from "../stores/executor-store";
import { createSql, migrate } from "../stores/sql";
import { getOrInsert } from "../core/collections";
import { toolRegistry } from "../tools";
import type { OpenUpload } from "../uploads/uploads";

/** An alarm takes no new attempt past this many subrequests (half the platform's cap; less if the run's policy says so)... */
const YIELD_AFTER_SUBREQUESTS = MAX_SUBREQUESTS_PER_INVOCATION / 2;
/** ...or past this long (an alarm may run 15 minutes): the next alarm, a new invocation, takes it. */
const YIELD_AFTER_MS = 5 * 60_000;
/** An end reported from a stop's or a wind-down's own call is sent again by the alarm this long after, should the object die meanwhile. */
const END_RETRY_MS = 60_000;

/** What the attempts of one alarm invocation share: its meter and subrequest budget, its wind-down, its link, its pacers, its sources. */
interface Invocation {
  meter: SubrequestMeter;
  budget: number;
  windDown: WindDown;
  link: CoordinatorLink;
  usage: MeterReports;
  pacers: PacerRegistry;
  /** The capture sources its attempts confirmed the coordinator still answers for (CaptureSources.forAttempt). */
  confirmed: Set<string>;
}

/**
 * One executor of one run (named `<runId>#<slot>`): it runs the chunk
 * attempts its run's coordinator assigns, in its own alarm invocation, so
 * each has this object's six outbound connections, its own subrequests and
 * its own CPU (DESIGN.md, "Where chunk work runs"). It runs one attempt, or
 * two while the older one drains: the coordinator assigns the next one
 * `alongside` it once it says so, and the newer one takes only the
 * connections the older one leaves idle (they share this invocation's
 * pacers, which serve older chunks first), so no connection idles between
 * attempts.
 *
 * `assign` only stores the attempt and wakes the alarm. A newer assignment
 * replaces every held attempt but the one it runs alongside, and stops
 * them; one from an older epoch than this executor has seen (a stale
 * coordinator's) is dropped. An attempt found `running` when the alarm
 * starts was cut off by a restart: it is reported stopped (with the outbox
 * of what it billed), and the coordinator redispatches its chunk under a new
 * epoch; fencing makes anything it left in flight harmless.
 */
export class MapExecutor extends DurableObject<Env> {
  #store: ExecutorStore;
  #gate: OutboundGate | null;
  /** The attempts running in this instance, each with its stop, its coordinator's wind-down and its reporter. */
  #running = new Map<string, { stop: AbortController; windDown: AbortController; reporter: AttemptReporter }>();
  /** An alarm is running the held attempts... */
  #looping = false;
  /** ...and waits: a new assignment wakes it. */
  #wake = () => {};
  /** The run's upload, opened once (its index) for all the attempts this instance runs. */
  #uploads = new Map<string, Promise<OpenUpload>>();
  #sources = new CaptureSources();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#store = new ExecutorStore({ sql: createSql(ctx.storage) });
    this.#gate = outboundGateFor(env);
    void ctx.blockConcurrencyWhile(async () => migrate(ctx.storage, EXECUTOR_MIGRATIONS));
  }

  /** Holds `assignment` and wakes the alarm: true, or false when it was dropped (an older epoch than this executor has seen). */
  async assign(assignment: ChunkAssignment): Promise<boolean> {
    const before = this.#store.held();
    // A stale coordinator's assignment (an older epoch) is dropped: its attempt would be fenced off anyway.
    if (!this.ctx.storage.transactionSync(() => this.#store.assign(assignment))) return false;
    const held = new Set(this.#store.held().map((h) => h.assignment.attempt.attemptId));
    const reason = (attemptId: string) => `attempt ${attemptId} was replaced by ${assignment.attempt.attemptId}`;
    for (const [attemptId, running] of this.#running)
      if (!held.has(attemptId)) running.stop.abort(new TroupeError("superseded", reason(attemptId)));
    // A running alarm starts it at once; else wake one.
    if (this.#looping) this.#wake();
    else await this.ctx.storage.setAlarm(Date.now());
    // A wound-down attempt replaced while held says so: the coordinator frees the spend it was granted.
    for (const dropped of before) {
      const { attemptId } = dropped.assignment.attempt;
      if (dropped.resume && dropped.state === "assigned" && !held.has(attemptId) && !this.#running.has(attemptId))
        await this.#ownReporter(dropped)
          .end(stoppedUnstarted(dropped, reason(attemptId)))
          .catch(() => {});
    }
    return true;
  }

  /**
   * Stops the attempt: one running is aborted (it reports its own end); one
   * held and not started never starts (a cancelled run's, or one whose
   * coordinator gave this executor up), and is reported stopped ({@link #endHeldUnstarted}).
   */
  async stop(attemptId: string, reason: string): Promise<void> {
    const running = this.#running.get(attemptId);
    if (running) return void running.stop.abort(new TroupeError("stopped", reason));
    const held = this.#heldUnstarted(attemptId);
    if (held) await this.#endHeldUnstarted(held, stoppedUnstarted(held, reason));
  }

  /**
   * Its coordinator's invocation nears its limits: the attempt winds down as
   * it would at this executor's own (no request more is sent, the rows
   * computed are stored) but ends, handing the rows it left back to the
   * coordinator, which runs them from its next invocation. One held and not
   * running ends so at once, with every row it has left ({@link #endHeldUnstarted}).
   */
  async windDown(attemptId: string, reason: string): Promise<void> {
    const running = this.#running.get(attemptId);
    if (running) return void running.windDown.abort(new TroupeError(HANDED_BACK, reason));
    const held = this.#heldUnstarted(attemptId);
    if (held) await this.#endHeldUnstarted(held, handedBack(held));
  }

  /** The attempt, if it is held and not running: not started, or held to go on after a wind-down. */
  #heldUnstarted(attemptId: string): HeldAssignment | undefined {
    return this.#store.held().find((h) => h.state === "assigned" && h.assignment.attempt.attemptId === attemptId);
  }

  /**
   * Ends an attempt held and not running, and reports its end (with what the
   * outbox holds) from this call's own invocation. It is held `ended`, in the
   * step that ends it, and the alarm armed before the report goes: should the
   * report fail, or this object die while it reports, the alarm sends the end
   * and the bills again until the coordinator hears them (it applies a report
   * sent again once, and each bill once). Resolves once the end is reported,
   * or held to be: the coordinator does not wait on the call.
   */
  async #endHeldUnstarted(held: HeldAssignment, end: AttemptEnd): Promise<void> {
    const { attemptId } = held.assignment.attempt;
    this.ctx.storage.transactionSync(() => {
      // Through `running`: ExecutorStore.unreported leaves an attempt `assigned` and not held to go on as it is (it
      // takes it for a fresh assignment of the same attempt).
      this.#store.markRunning(attemptId);
      this.#store.unreported(attemptId, { unanswered: null, end, logs: [] });
    });
    // A running alarm is itself retried should this object die; else one is armed, unless one comes sooner.
    const retryAt = Date.now() + END_RETRY_MS;
    const armed = this.#looping ? null : await this.ctx.storage.getAlarm();
    const arming = !this.#looping && (armed === null || armed > retryAt);
    if (arming) await this.ctx.storage.setAlarm(retryAt);
    const reporter = this.#ownReporter(held);
    try {
      await reporter.end(end);
    } catch (error) {
      // Held with what is left to send, for the alarm, at once (the platform's retries of it back off).
      this.#store.unreported(attemptId, reporter.unreported(end), held.assignment);
      if (this.#looping) this.#wake();
      else await this.ctx.storage.setAlarm(Date.now());
      console.warn(`${messageOf(error)}: its executor's alarm sends it again`);
      return;
    }
    this.#store.finishEnded(attemptId);
    // Armed for this end alone, which was heard.
    if (arming && !this.#looping && this.#store.held().length === 0) await this.ctx.storage.deleteAlarm();
  }

  /**
   * What says the held attempt lives, in reports with nothing else, for the invocation: an answer that no
   * invocation waits for it drops it.
   */
  #heartbeats(held: HeldAssignment, invocation: Invocation): AttemptReporter {
    const { assignment } = held;
    const { attemptId } = assignment.attempt;
    return new AttemptReporter({
      link: invocation.link,
      store: this.#store,
      usage: invocation.usage,
      report: this.#reportOf(assignment),
      onStop: (reason) => {
        // The answer to this assignment's heartbeat, not to the same attempt's assignment by a later invocation since.
        const now = this.#store.held().find((h) => h.assignment.attempt.attemptId === attemptId);
        if (now?.assignment.invocation === assignment.invocation) void this.stop(attemptId, reason).catch(() => {});
      },
    });
  }

  /** A reporter of an attempt held and not running, from an invocation of its own (a stop's, a wind-down's, an assignment's). */
  #ownReporter(held: HeldAssignment): AttemptReporter {
    const { runId } = held.assignment;
    const meter = new SubrequestMeter({ cap: subrequestCapFor(this.env) });
    const faults = faultProbeFor(this.env, { crash: (why) => this.#crash(why), play: held.assignment.dataset.play });
    return new AttemptReporter({
      link: new CoordinatorLink({ env: this.env, runId, meter, faults }),
      store: this.#store,
      usage: new MeterReports(meter),
      report: this.#reportOf(held.assignment),
      sizing: false,
    });
  }

  /** A rerun's sweep of several chunks (runSweep), in this call's own invocation: it leases nothing, so nothing of it is held. */
  async sweep(sweep: ChunkSweepAssignment): Promise<ChunkSweepResult> {
    const meter = new SubrequestMeter({ cap: subrequestCapFor(this.env) });
    const faults = faultProbeFor(this.env, { crash: (reason) => this.#crash(reason), play: sweep.dataset.play });
    const link = new CoordinatorLink({ env: this.env, runId: sweep.runId, meter });
    const host = {
      env: this.env,
      plays: playRegistry(this.env),
      meter,
      faults,
      uploads: this.#uploads,
      source: (attemptSeq: number, map: string) => this.#sources.forSweep(link, { attemptSeq, map, invocation: sweep.invocation }),
    };
    const reused = await withOutbound({ caller: this.#caller(), gate: this.#gate }, () => runSweep(host, sweep));
    return { reused, usage: usageOf(meter) };
  }

  override async alarm(info?: AlarmInvocationInfo): Promise<void> {
    if (this.#looping) return;
    this.#looping = true;
    try {
      await this.#runHeld();
    } catch (error) {
      // Attempts still held (an end not yet reported, with its bills) would wait for the next assignment, maybe for ever.
      const late = lateAlarmRetryAt(info?.retryCount ?? 0, Date.now());
      if (late !== null && this.#store.held().length > 0) await this.ctx.storage.setAlarm(late);
      throw error;
    } finally {
      this.#looping = false;
    }
    // Left for a fresh invocation (see #runHeld), or assigned while this one closed its pacers: a new alarm takes it.
    if (this.#store.held().length > 0) await this.ctx.storage.setAlarm(Date.now());
  }

  /**
   * Runs what is held, each attempt as soon as it is, until nothing is; or,
   * past half of an invocation's subrequests or five minutes, starts nothing
   * more and returns once what runs has ended, leaving the rest to a new
   * alarm (a fresh invocation). An attempt still running as the invocation
   * nears the platform's subrequest cap or its 15 minutes per alarm is wound
   * down (wind-down.ts) and held to go on in that new alarm, so that a busy
   * executor never meets them. Throws when an attempt's end could not be
   * reported, once the others have ended: the alarm's retry reports it
   * stopped.
   */
  async #runHeld(): Promise<void> {
    const first = this.#store.held()[0]?.assignment;
    if (!first) return;
    const startedAt = Date.now();
    const meter = new SubrequestMeter({ cap: subrequestCapFor(this.env) });
    const invocation: Invocation = {
      meter,
      // The run's own budget (its policy) once an attempt has read it: tests shrink it to make this loop yield.
      budget: YIELD_AFTER_SUBREQUESTS,
      windDown: new WindDown({ meter, limits: policyFor(this.env), now: Date.now }),
      link: new CoordinatorLink({
        env: this.env,
        runId: first.runId,
        meter,
        faults: faultProbeFor(this.env, { crash: (why) => this.#crash(why), play: first.dataset.play }),
      }),
      usage: new MeterReports(meter),
      confirmed: new Set(),
      pacers: new PacerRegistry({
        env: this.env,
        org: first.dataset.org,
        caller: `${first.runId}/${this.#caller()}/${crypto.randomUUID()}`,
        meter,
        // A pacer's notices go to the newest attempt running.
        log: (line) => [...this.#running.values()].at(-1)?.reporter.log(line),
        now: Date.now,
      }),
    };
    const started = new Map<string, Promise<void>>();
    const failures: unknown[] = [];
    // An attempt held and not started (assigned alongside one that drains while this invocation starts nothing more,
    // or held to go on after a wind-down) says it is alive: its coordinator would give it up while the older one ends.
    // One at a time per attempt: a slow coordinator is not sent a queue of them.
    const policy = policyFor(this.env);
    const beating = new Set<string>();
    /** By attempt and the coordinator's invocation that assigned it. */
    const heartbeats = new Map<string, AttemptReporter>();
    const heartbeat = setInterval(
      () => {
        for (const held of this.#store.held()) {
          const { attemptId } = held.assignment.attempt;
          if (held.state !== "assigned" || started.has(attemptId) || beating.has(attemptId)) continue;
          beating.add(attemptId);
          // Per assignment: the same attempt handed back and assigned again by a later invocation of its coordinator
          // lives under that one (a report naming the earlier one is answered with a stop).
          const assigned = `${attemptId}:${held.assignment.invocation ?? ""}`;
          const reporter = getOrInsert(heartbeats, assigned, () => this.#heartbeats(held, invocation));
          void reporter
            .flush(null)
            .catch(() => {})
            .finally(() => beating.delete(attemptId));
        }
      },
      Math.min(5_000, policy.rowLeaseTtlMs / 3),
    );
    try {
      for (;;) {
        const yielding =
          failures.length > 0 ||
          invocation.windDown.signal.aborted ||
          meter.total >= invocation.budget ||
          Date.now() - startedAt >= YIELD_AFTER_MS;
        const held = this.#store.held();
        for (const each of yielding ? [] : held) {
          const attemptId = each.assignment.attempt.attemptId;
          if (started.has(attemptId)) continue;
          // A failure waits for the others: the alarm's retry must not find them running.
          const run = this.#runOne(each, invocation).catch((error: unknown) => void failures.push(error));
          started.set(
            attemptId,
            run.finally(() => started.delete(attemptId)),
          );
        }
        if (started.size === 0) break;
        await Promise.race([...started.values(), new Promise<void>((resolve) => (this.#wake = resolve))]);
      }
    } finally {
      clearInterval(heartbeat);
      invocation.windDown.close();
      await invocation.pacers.closeAll();
    }
    if (failures.length > 0) throw failures[0];
  }

  /** Runs one held attempt to its end, and reports it; or, wound down, holds it to go on in the next invocation. */
  async #runOne({ assignment, state, resume, unreported }: HeldAssignment, invocation: Invocation): Promise<void> {
    const { attemptId } = assignment.attempt;
    const caller = this.#caller();
    const reporter = new AttemptReporter({
      link: invocation.link,
      store: this.#store,
      usage: invocation.usage,
      report: this.#reportOf(assignment),
      sizing: assignment.sizing ?? false,
      onStop: (reason) => this.#running.get(attemptId)?.stop.abort(new TroupeError("stopped", reason)),
      unreported,
    });
    if (state === "ended" && unreported) {
      // Ended, and its end could not be reported (this is the alarm's retry): it is sent again, as it was. The row
      // stays as it is should that fail, and goes only if it is still this end: a later invocation may assign the
      // same attempt meanwhile (ExecutorStore.assign), and that assignment runs once this is done.
      const end = unreported.end ?? unreported.unanswered?.report.end;
      await reporter.end(end ?? { kind: "stopped", reason: "its end was lost" });
      this.#store.finishEnded(attemptId);
      return;
    }
    if (state !== "assigned" || !this.#store.markRunning(attemptId)) {
      // Cut off by a restart of this object: the coordinator redispatches it.
      await this.#end(attemptId, reporter, { kind: "stopped", reason: "its executor restarted while it ran" });
      this.#store.finish(attemptId);
      return;
    }
    const stop = new AbortController();
    const windDown = new AbortController();
    this.#running.set(attemptId, { stop, windDown, reporter });
    const faults = faultProbeFor(this.env, { crash: (reason) => this.#crash(reason), play: assignment.dataset.play });
    try {
      const end = await withOutbound({ caller, gate: this.#gate }, () =>
        runAttempt(
          {
            env: this.env,
            store: this.#store,
            plays: playRegistry(this.env),
            tools: toolRegistry(this.env),
            link: invocation.link,
            meter: invocation.meter,
            faults,
            reporter,
            pacers: invocation.pacers,
            uploads: this.#uploads,
            source: async (attemptSeq, map) => {
              const at = { attemptSeq, map, invocation: assignment.invocation };
              const source = await this.#sources.forAttempt(invocation.link, at, invocation.confirmed);
              if (source) {
                invocation.budget = Math.min(invocation.budget, source.policy.invocationSubrequestBudget);
                invocation.windDown.limit(source.policy);
              }
              return source;
            },
            now: Date.now,
          },
          { assignment, resume },
          stop.signal,
          AbortSignal.any([invocation.windDown.signal, windDown.signal]),
        ),
      );
      // Wound down for its coordinator: the rows it left go back to it, not on in this executor.
      if (end.kind === "resume" && windDown.signal.aborted) {
        await this.#end(attemptId, reporter, handedBack({ assignment, resume: end.resume }), assignment);
      } else if (end.kind === "resume") {
        // Held first: should this object die now, the next alarm goes on with it all the same.
        if (!this.#store.resume(attemptId, end.resume, assignment)) return;
        await reporter.suspend().catch(() => {});
        await faults.check("executor.held");
        if (windDown.signal.aborted && !stop.signal.aborted) {
          // Its coordinator asked while it was being held: the rows go back all the same.
          await this.#endHeld(attemptId, reporter, handedBack({ assignment, resume: end.resume }), assignment);
          return;
        }
        if (!stop.signal.aborted) return;
        // Stopped while it was being held (a cancel, its coordinator giving it up): it does not go on.
        await this.#endHeld(attemptId, reporter, { kind: "stopped", reason: messageOf(stop.signal.reason) }, assignment);
        return;
      } else await this.#end(attemptId, reporter, end, assignment);
    } finally {
      this.#running.delete(attemptId);
    }
    this.#store.finish(attemptId);
  }

  /**
   * Reports the attempt's end. One the coordinator did not hear is held `ended` before the alarm fails: its
   * retry sends it again, rather than taking the attempt for one a restart cut off (its chunk would be
   * redispatched, its rows all done).
   */
  async #end(attemptId: string, reporter: AttemptReporter, end: AttemptEnd, of?: ChunkAssignment): Promise<void> {
    try {
      await reporter.end(end);
    } catch (error) {
      this.#store.unreported(attemptId, reporter.unreported(end), of);
      throw error;
    }
  }

  /**
   * Ends an attempt held to go on after a wind-down (its coordinator asked for its rows back, or it was stopped
   * while being held): held `ended` first, so that an object that dies while it reports sends the end again
   * rather than going on with the attempt.
   */
  async #endHeld(attemptId: string, reporter: AttemptReporter, end: AttemptEnd, of: ChunkAssignment): Promise<void> {
    this.#store.unreported(attemptId, reporter.unreported(end), of);
    await this.#end(attemptId, reporter, end, of);
    // A later invocation may have assigned the same attempt meanwhile: that assignment stays.
    this.#store.finishEnded(attemptId);
  }

  /** What each report of the assignment's attempt says of it. */
  #reportOf({ attempt, invocation, map, chunk }: ChunkAssignment) {
    return { executor: this.#caller(), attemptId: attempt.attemptId, attemptSeq: attempt.attemptSeq, invocation, map, chunk };
  }

  /** This object as the simulated provider and the outbound gate name it. */
  #caller(): string {
    return `MapExecutor:${this.ctx.id.name ?? this.ctx.id.toString()}`;
  }

  /**
   * Aborts this object (test faults only): the attempt dies as an eviction
   * would kill it. The code of the aborted instance would otherwise run on
   * (its promises are not cancelled); an evicted object's does not, so it
   * stops here and reports nothing more.
   */
  #crash(reason: string): never {
    for (const { reporter, stop } of this.#running.values()) {
      reporter.kill();
      stop.abort(new Error(reason));
    }
    this.ctx.abort(reason);
    throw new Error(reason);
  }
}
