import { DurableObject } from "cloudflare:workers";
import { type CaptureSource, CoordinatorLink } from "../clients/executors";
import { faultProbeFor } from "../clients/faults";
import type { ChunkAssignment, ChunkSweepAssignment, ChunkSweepResult } from "../contracts/executors";
import { TroupeError } from "../core/errors";
import { SubrequestMeter } from "../core/meter";
import { type OutboundGate, withOutbound } from "../core/outbound";
import { MAX_SUBREQUESTS_PER_INVOCATION, outboundGateFor, subrequestCapFor } from "../core/platform-limits";
import { playRegistry } from "../plays";
import { AttemptReporter, usageOf } from "../runtime/executor/attempt-reporter";
import { runAttempt, runSweep } from "../runtime/executor/attempt-runner";
import { EXECUTOR_MIGRATIONS, ExecutorStore } from "../stores/executor-store";
import { createSql, migrate } from "../stores/sql";
import { toolRegistry } from "../tools";
import type { OpenUpload } from "../uploads/uploads";

/** An alarm takes no new attempt past this many subrequests (half the platform's cap; less if the run's policy says so)... */
const YIELD_AFTER_SUBREQUESTS = MAX_SUBREQUESTS_PER_INVOCATION / 2;
/** ...or past this long (an alarm may run 15 minutes): the next alarm, a new invocation, takes it. */
const YIELD_AFTER_MS = 5 * 60_000;

/**
 * One executor of one run (named `<runId>#<slot>`): it runs the chunk
 * attempts its run's coordinator assigns, one at a time, in its own alarm
 * invocation, so each has this object's six outbound connections, its own
 * subrequests and its own CPU (DESIGN.md, "Where chunk work runs").
 *
 * `assign` only stores the attempt and arms the alarm. A newer assignment
 * replaces an older one and stops it; one from an older epoch than this
 * executor has seen (a stale coordinator's) is dropped. An attempt found `running` when the
 * alarm starts was cut off by a restart: it is reported stopped (with the
 * outbox of what it billed), and the coordinator redispatches its chunk under
 * a new epoch; fencing makes anything it left in flight harmless.
 */
export class MapExecutor extends DurableObject<Env> {
  #store: ExecutorStore;
  #gate: OutboundGate | null;
  /** The attempt running in this instance, its stop and its reporter. */
  #current: { attemptId: string; stop: AbortController; reporter: AttemptReporter } | null = null;
  /** An alarm is running the held attempts: a new assignment is its next. */
  #looping = false;
  /** What each epoch's invocation of the run had done, asked once per epoch. */
  #sources = new Map<number, Promise<CaptureSource | null>>();
  /** The run's upload, opened once (its index) for all the attempts this instance runs. */
  #uploads = new Map<string, Promise<OpenUpload>>();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#store = new ExecutorStore({ sql: createSql(ctx.storage) });
    this.#gate = outboundGateFor(env);
    void ctx.blockConcurrencyWhile(async () => migrate(ctx.storage, EXECUTOR_MIGRATIONS));
  }

  /** Holds `assignment` and wakes the alarm: true, or false when it was dropped (an older epoch than this executor has seen). */
  async assign(assignment: ChunkAssignment): Promise<boolean> {
    // A stale coordinator's assignment (an older epoch) is dropped: its attempt would be fenced off anyway.
    if (!this.ctx.storage.transactionSync(() => this.#store.assign(assignment))) return false;
    const current = this.#current;
    if (current && current.attemptId !== assignment.attempt.attemptId)
      current.stop.abort(new TroupeError("superseded", `attempt ${current.attemptId} was replaced by ${assignment.attempt.attemptId}`));
    // A running alarm takes it next (it reads what is held before it returns, with no await between); else wake one.
    if (!this.#looping) await this.ctx.storage.setAlarm(Date.now());
    return true;
  }

  async stop(attemptId: string, reason: string): Promise<void> {
    if (this.#current?.attemptId === attemptId) this.#current.stop.abort(new TroupeError("stopped", reason));
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
      source: (attemptSeq: number) => this.#source(link, attemptSeq),
    };
    const reused = await withOutbound({ caller: this.#caller(), gate: this.#gate }, () => runSweep(host, sweep));
    return { reused, usage: usageOf(meter) };
  }

  override async alarm(): Promise<void> {
    if (this.#looping) return;
    this.#looping = true;
    try {
      await this.#runHeld();
    } finally {
      this.#looping = false;
    }
  }

  /**
   * Runs what is held, one attempt after another, until nothing is; or, past
   * half of an invocation's subrequests or five minutes, hands the rest to a
   * new alarm (a fresh invocation), so that a busy executor never meets the
   * platform's subrequest cap or its 15 minutes per alarm between attempts.
   */
  async #runHeld(): Promise<void> {
    const runId = this.#store.held()?.assignment.runId;
    if (!runId) return;
    const startedAt = Date.now();
    const meter = new SubrequestMeter({ cap: subrequestCapFor(this.env) });
    // The run's own budget (its policy) once an attempt has read it: tests shrink it to make this loop yield.
    let budget = YIELD_AFTER_SUBREQUESTS;
    const link = new CoordinatorLink({ env: this.env, runId, meter });
    const caller = this.#caller();
    for (let held = this.#store.held(); held; held = this.#store.held()) {
      if (meter.total >= budget || Date.now() - startedAt >= YIELD_AFTER_MS) {
        await this.ctx.storage.setAlarm(Date.now());
        return;
      }
      const { assignment } = held;
      const reporter = new AttemptReporter({
        link,
        store: this.#store,
        meter,
        report: { executor: caller, attemptId: assignment.attempt.attemptId, map: assignment.map, chunk: assignment.chunk },
      });
      if (held.state === "running" || !this.#store.markRunning(assignment.attempt.attemptId)) {
        // Cut off by a restart of this object: the coordinator redispatches it.
        await reporter.end({ kind: "stopped", reason: "its executor restarted while it ran" });
        this.#store.finish(assignment.attempt.attemptId);
        continue;
      }
      const stop = new AbortController();
      this.#current = { attemptId: assignment.attempt.attemptId, stop, reporter };
      const faults = faultProbeFor(this.env, { crash: (reason) => this.#crash(reason), play: assignment.dataset.play });
      try {
        const end = await withOutbound({ caller, gate: this.#gate }, () =>
          runAttempt(
            {
              env: this.env,
              store: this.#store,
              plays: playRegistry(this.env),
              tools: toolRegistry(this.env),
              link,
              meter,
              faults,
              reporter,
              uploads: this.#uploads,
              source: async (attemptSeq) => {
                const source = await this.#source(link, attemptSeq);
                if (source) budget = Math.min(budget, source.policy.invocationSubrequestBudget);
                return source;
              },
              now: Date.now,
            },
            assignment,
            stop.signal,
          ),
        );
        await reporter.end(end);
      } finally {
        this.#current = null;
      }
      this.#store.finish(assignment.attempt.attemptId);
    }
  }

  /** This object as the simulated provider and the outbound gate name it. */
  #caller(): string {
    return `MapExecutor:${this.ctx.id.name ?? this.ctx.id.toString()}`;
  }

  #source(link: CoordinatorLink, attemptSeq: number): Promise<CaptureSource | null> {
    let source = this.#sources.get(attemptSeq);
    if (!source) {
      source = link.captureSource(attemptSeq);
      // A failed ask is asked again by the next attempt.
      source.catch(() => this.#sources.delete(attemptSeq));
      this.#sources.set(attemptSeq, source);
    }
    return source;
  }

  /**
   * Aborts this object (test faults only): the attempt dies as an eviction
   * would kill it. The code of the aborted instance would otherwise run on
   * (its promises are not cancelled); an evicted object's does not, so it
   * stops here and reports nothing more.
   */
  #crash(reason: string): never {
    this.#current?.reporter.kill();
    this.#current?.stop.abort(new Error(reason));
    this.ctx.abort(reason);
    throw new Error(reason);
  }
}
