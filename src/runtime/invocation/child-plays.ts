/**
 * Child plays: `ctx.runPlay(name, input, options)` starts a run of another
 * play in its own RunCoordinator and waits for its end.
 *
 * Never twice: the child's identity is a digest of (org, play name, the
 * play's code fingerprint, its validated input, the call's `key`), and the
 * child's run id is derived from it. The parent's journal records the call
 * (keyed by the call without the fingerprint: replayed after a deploy that
 * changed the child's code, it finds the child it started), and
 * `RunCoordinator.start` is idempotent for a
 * run id, so a replay, a retried invocation or a rerun of the parent finds
 * the same child instead of starting another. A child that failed or was
 * cancelled (or completed longer ago than `staleAfterSeconds`) is not reused
 * by a new call: the next generation of the id runs instead. Under
 * `staleAfterSeconds` the identity holds the window its parent started in.
 *
 * The parent learns of the end by a message from the child's coordinator
 * (`childFinished`); if that is lost, the parent's alarm asks the child when
 * the entry's check deadline comes. At play level a running child parks the
 * run (`waiting`): the call does not settle in that invocation, which ends
 * there (Waits.held), and the replay after the child's end settles it. Inside
 * `ctx.map` a row waits for its child in process for up to
 * `childInlineWaitMs`, then its chunk yields: the invocation stops
 * (like a cancel that ends nothing), completed rows are kept, and the chunk
 * is redispatched when the child has ended, finding its result in the journal.
 */
import type { PlayDefinition, RunPlayOptions } from "../../play/types";
import type { JournalStore, WaitEntry, WaitOutcome } from "../../stores/journal-store";
import type { RunView } from "../../api/responses";
import { RunClient } from "../../clients/runs";
import type { InvocationScope } from "./scope";
import { canonicalJson, sha256Hex } from "../../core/hash";
import { describeIssues, messageOf, TerminalError } from "../../core/errors";
import { PARENT_CAP_REFUSAL, SpendCapReached } from "../tools/spend";
import { InfraError } from "./yield";
import { never, type WaitPolicy, type Waits } from "./waits";
import { forEachLimited, getOrInsert } from "../../core/collections";
import { isTerminal } from "../../core/statuses";
import type { Emit } from "../../contracts/events";

/** What a play-level call whose child has not ended answers {@link ChildPlays.run}, which leaves the play's call unsettled. */
const HELD: unique symbol = Symbol("held");

/** Generations of one child identity tried before giving up (each failed generation is skipped). */
const MAX_CHILD_GENERATIONS = 50;

/** How a child run ended, as its coordinator reports it. */
export interface ChildEnd {
  childRunId: string;
  status: "completed" | "failed" | "cancelled";
  result: unknown;
  error: { code: string; message: string } | null;
  /** What it spent, its own children included (credits); absent when read from its view. */
  spentCredits?: number;
  /** `spentCredits` counts allotments its own children held: a later, lower figure replaces it. */
  spentProvisional?: boolean;
}

/**
 * In-process waits for children's messages, per coordinator instance: a row
 * waiting on its child wakes as soon as `childFinished` arrives.
 */
export class ChildWaiters {
  #waiting = new Map<string, Set<() => void>>();

  /** Resolves when the child is reported ended or after `ms`; rejects when `signal` aborts. */
  wait(childRunId: string, ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const set = this.#waiting.get(childRunId) ?? new Set();
      this.#waiting.set(childRunId, set);
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        set.delete(done);
        if (set.size === 0) this.#waiting.delete(childRunId);
      };
      const onAbort = () => {
        done();
        reject(signal.reason);
      };
      const wake = () => {
        done();
        resolve();
      };
      const timer = setTimeout(wake, Math.max(0, ms));
      signal.addEventListener("abort", onAbort, { once: true });
      set.add(wake);
    });
  }

  notify(childRunId: string): void {
    for (const wake of [...(this.#waiting.get(childRunId) ?? [])]) wake();
  }
}

/** What a waiting entry becomes when its child ended. */
export function childOutcome(play: string, end: ChildEnd): WaitOutcome {
  if (end.status === "completed") return { state: "done", result: end.result };
  if (end.status === "cancelled")
    return { state: "failed", error: { code: "child_cancelled", message: `child play ${play} (${end.childRunId}) was cancelled` } };
  const cause = end.error ? `${end.error.code}: ${end.error.message}` : "no error recorded";
  // A child stopped at a spend cap (its parent's, which counts the child's spend, or the org's day) stops the parent too.
  const code = end.error?.code === "spend_cap_reached" ? "spend_cap_reached" : "child_failed";
  return { state: "failed", error: { code, message: `child play ${play} (${end.childRunId}) failed: ${cause}`.slice(0, 4000) } };
}

/** Records a child's end in every entry waiting on it; returns how many it ended. */
export function recordChildEnd(journal: JournalStore, end: ChildEnd, emit: Emit): number {
  let ended = 0;
  for (const entry of journal.waitingOn(end.childRunId)) {
    if (!journal.settle(entry.key, childOutcome(entry.childPlay ?? "?", end))) continue;
    ended++;
    emit("child.finished", {
      childRunId: end.childRunId,
      play: entry.childPlay,
      status: end.status,
      ...(end.error ? { error: end.error } : {}),
    });
  }
  return ended;
}

export interface ChildPlaysOptions {
  /** The invocation the children are started from. */
  scope: InvocationScope;
  journal: JournalStore;
  plays: ReadonlyMap<string, PlayDefinition>;
  policy: WaitPolicy;
  waiters: ChildWaiters;
  /** Parks the run when a play-level call must wait. */
  waits: Waits;
  /** Whether this run spends under a cap of its own or its parent's: its children then spend from it (child-spend.ts). */
  capped: boolean;
  /** A row's child still runs after the in-process wait: stop this invocation and resume at `resumeAt`. */
  suspend(resumeAt: number, reason: string): Error;
  /** Whether the run itself is being stopped (its cancel, its runtime limit), whatever stopped this invocation first. */
  stopping(): boolean;
}

export class ChildPlays {
  #deps: ChildPlaysOptions;
  #scope: InvocationScope;
  #runs: RunClient;
  #binding = new Map<string, Promise<void>>();
  /** Play-level calls of this invocation until each has parked or settled: the play may return without awaiting one. */
  #calls = new Set<Promise<unknown>>();
  #submits: Semaphore;

  constructor(options: ChildPlaysOptions) {
    this.#deps = options;
    this.#scope = options.scope;
    this.#runs = new RunClient({ env: options.scope.env, org: options.scope.run.org, meter: options.scope.meter });
    this.#submits = new Semaphore(options.policy.childSubmitConcurrency);
  }

  /**
   * `ctx.runPlay`: `row` is the row key when called from a field function, else null. A play-level call counts from
   * the moment it is made ({@link idle}): one the play does not await starts its child and the run waits for it, as
   * for an un-awaited `ctx.sleep`, even when the play returns before the call has opened its entry.
   */
  run(name: string, input: unknown, options: RunPlayOptions, row: string | null): Promise<unknown> {
    const call = this.#run(name, input, options, row);
    if (row !== null) return call;
    this.#calls.add(call);
    // Also handles an un-awaited call's end: its park (the run's own control flow), or a failure the play left unread.
    const forget = () => this.#calls.delete(call);
    call.then(forget, forget);
    // A child still running never settles the call in this invocation (the driver ends it: Waits.held), so a catch-all
    // around it does not take the park for a failure and run its fallback beside the child.
    const seen = call.then((value) => (value === HELD ? never() : value));
    seen.catch(() => {});
    return seen;
  }

  async #run(name: string, input: unknown, options: RunPlayOptions, row: string | null): Promise<unknown> {
    const { journal, policy } = this.#deps;
    const { run } = this.#scope;
    checkOptions(name, options);
    const play = this.#deps.plays.get(name);
    if (!play) throw new TerminalError("unknown_play", `ctx.runPlay: no play named ${JSON.stringify(name)} is deployed`);
    if (run.depth + 1 > policy.maxPlayDepth) {
      throw new TerminalError(
        "play_depth_exceeded",
        `ctx.runPlay("${name}"): plays nest at most ${policy.maxPlayDepth} deep (maxPlayDepth), and this run is already at depth ${run.depth}`,
      );
    }
    const parsed = play.input.safeParse(input);
    if (!parsed.success) {
      const issues = describeIssues(parsed.error, { root: "(input)" });
      throw new TerminalError(
        "invalid_child_input",
        `ctx.runPlay("${name}"): the input is invalid for that play: ${issues}`.slice(0, 2000),
      );
    }
    const fresh = run.force || run.forceToolRefresh ? run.runId : null;
    // The child's identity (its run id, reused by other parents) follows the child play's code; this run's journal
    // entry does not: replayed after a deploy that changed that code, the call is the child it started before.
    // Under staleAfterSeconds, parents started within one window of it share a child; a later window's is a new
    // identity: found by probing generations, each refresh cost a start per earlier one, and the 50th failed the call.
    const window = staleWindow(options.staleAfterSeconds, run.createdAt);
    const identity = [run.org, name, await fingerprintOf(play), parsed.data, options.key ?? null, fresh];
    const digest = await sha256Hex(canonicalJson(window === null ? identity : [...identity, window]));
    // The call's entry follows the input as the play passed it: parsed, it holds the child play's defaults, and a
    // deploy adding a defaulted field made a replay miss the entry and start a second child.
    const call = await sha256Hex(canonicalJson([run.org, name, input, options.key ?? null, fresh]));
    const untimed = `child:input:${call.slice(0, 48)}`;
    // Each timeout waits under an entry of its own, on the same child: an entry's timeout is every caller's, so
    // identical calls with different timeouts (or none) would all end at the first one's.
    const key = options.timeoutMs === undefined ? untimed : `${untimed}:timeout:${options.timeoutMs}`;
    const shared = key === untimed ? null : journal.get(untimed);
    if (shared?.timeoutAt != null && shared.timeoutAt - shared.createdAt === options.timeoutMs) journal.rekey(untimed, key);
    // Entries journaled before are filed under it from now on: under the parsed input, and earlier under the digest.
    const parsedCall = await sha256Hex(canonicalJson([run.org, name, parsed.data, options.key ?? null, fresh]));
    journal.rekey(`child:call:${parsedCall.slice(0, 48)}`, key);
    // (Digests of then held no window.)
    journal.rekey(`child:${(await sha256Hex(canonicalJson(identity))).slice(0, 48)}`, key);
    let entry = journal.get(key);
    if (!entry) {
      if (journal.childCount() >= policy.maxChildrenPerRun) {
        throw new TerminalError(
          "child_limit_exceeded",
          `ctx.runPlay("${name}"): a run may start at most ${policy.maxChildrenPerRun} child plays (maxChildrenPerRun); split the work over several runs`,
        );
      }
      entry = journal.open({ key, kind: "child", childPlay: name, dueInMs: null, timeoutMs: options.timeoutMs ?? null });
    }
    if (entry.state === "waiting" && entry.childRunId === null) {
      let binding = this.#binding.get(key);
      if (!binding) {
        binding = this.#bind(entry, play, parsed.data, digest, options).finally(() => this.#binding.delete(key));
        this.#binding.set(key, binding);
      }
      await binding;
      entry = journal.get(key)!;
    }
    return this.#await(entry, row);
  }

  /**
   * Waits until the child submits in flight have been answered, and every play-level call has parked the run (its
   * child still runs) or settled: one the play did not await included.
   */
  async idle(): Promise<void> {
    // Rows' submits in flight now (a map left running goes on submitting until the invocation stops it), then the play's.
    await Promise.allSettled([...this.#binding.values()]);
    while (this.#calls.size > 0) await Promise.allSettled([...this.#calls]);
  }

  /**
   * Asks the children whose check deadline has come how they are doing (the
   * fallback for a lost `childFinished`), and times out those past `timeoutMs`.
   */
  async checkDue(limit = 100): Promise<void> {
    const { journal, policy } = this.#deps;
    const { now } = this.#scope;
    await forEachLimited(journal.dueChildren(now(), limit), policy.childSubmitConcurrency, (entry) => this.#check(entry));
  }

  /**
   * Asks the child how it is doing: its end is recorded when it has ended (by `timeoutAt`, for a call with one), and a
   * call past `timeoutAt` times out only then. Its `childFinished` may have been lost: timed out without asking, a
   * child that completed in time failed the call `child_timeout` (its end is told once, and the check at `timeoutAt`
   * came first whenever the timeout was shorter than the check interval).
   */
  async #check(entry: WaitEntry): Promise<void> {
    const { journal } = this.#deps;
    const timedOut = entry.timeoutAt !== null && this.#scope.now() >= entry.timeoutAt;
    let view: RunView | null;
    try {
      view = await this.#runs.getRun(entry.childRunId!);
    } catch (error) {
      if (timedOut) return this.#timeOut(entry);
      this.#scope.log(`could not ask child run ${entry.childRunId} how it is doing (${messageOf(error)}); asking again later`);
      return journal.setDue(entry.key, this.#nextCheck(entry));
    }
    if (!view) {
      journal.settle(entry.key, {
        state: "failed",
        error: { code: "child_missing", message: `child run ${entry.childRunId} of play ${entry.childPlay} does not exist` },
      });
    } else if (isTerminal(view.status) && !(timedOut && Date.parse(view.updatedAt) > entry.timeoutAt!)) {
      const error = view.error ? { code: view.error.code, message: view.error.message } : null;
      recordChildEnd(
        journal,
        { childRunId: view.runId, status: view.status as ChildEnd["status"], result: view.result, error },
        this.#scope.emit,
      );
    } else if (timedOut) return this.#timeOut(entry);
    else journal.setDue(entry.key, this.#nextCheck(entry));
  }

  async #await(entry: WaitEntry, row: string | null): Promise<unknown> {
    const { journal } = this.#deps;
    const { now } = this.#scope;
    if (entry.state === "waiting" && entry.timeoutAt !== null && now() >= entry.timeoutAt) {
      await (entry.childRunId === null ? this.#timeOut(entry) : this.#check(entry));
      entry = journal.get(entry.key)!;
      // Its cancel failed: the wait fails once the child is cancelled, from its next check on.
      if (entry.state === "waiting") {
        if (row === null) return this.#hold(`cancelling timed-out child play ${entry.childPlay} (${entry.childRunId})`);
        throw this.#deps.suspend(
          entry.dueAt ?? now() + this.#deps.policy.childCheckIntervalMs,
          `${row === null ? "the play" : `row ${row}`} cancels its timed-out child ${entry.childRunId}`,
        );
      }
    }
    if (entry.state === "done") return entry.result;
    // A child stopped at a cap: this run's (which counts the child's spend), or one it merely reused (child_failed).
    if (entry.state === "failed" && entry.error!.code === "spend_cap_reached")
      throw this.#deps.capped || !entry.error!.message.includes(PARENT_CAP_REFUSAL)
        ? this.#capReached(entry.error!.message)
        : new TerminalError("child_failed", entry.error!.message);
    if (entry.state === "failed") throw new TerminalError(entry.error!.code, entry.error!.message);
    const what = `child play ${entry.childPlay} (${entry.childRunId})`;
    if (row === null) return this.#hold(`waiting for ${what}`);
    const until = Math.min(now() + this.#deps.policy.childInlineWaitMs, entry.timeoutAt ?? Infinity);
    await this.#deps.waiters.wait(entry.childRunId!, until - now(), this.#scope.signal);
    const after = journal.get(entry.key)!;
    if (after.state !== "waiting" || (after.timeoutAt !== null && now() >= after.timeoutAt)) return this.#await(after, row);
    throw this.#deps.suspend(
      Math.min(after.dueAt ?? Infinity, now() + this.#deps.policy.childCheckIntervalMs),
      `row ${row} waits for ${what}`,
    );
  }

  /** A play-level call whose child has not ended: the invocation ends ({@link Waits.hold}), the call left unsettled. */
  #hold(reason: string): typeof HELD {
    this.#deps.waits.hold(reason);
    return HELD;
  }

  /** Finds (or starts) the run this entry stands for and records it. */
  async #bind(entry: WaitEntry, play: PlayDefinition, input: unknown, digest: string, options: RunPlayOptions): Promise<void> {
    const { journal } = this.#deps;
    const { run, now } = this.#scope;
    for (let generation = 0; generation < MAX_CHILD_GENERATIONS; generation++) {
      this.#scope.signal.throwIfAborted();
      const childRunId = `run_${(await sha256Hex(`${digest}#${generation}`)).slice(0, 32)}`;
      // A play that runs itself with the input it was given names itself: it would wait on itself until its deadline.
      if (childRunId === run.runId)
        throw new TerminalError(
          "play_cycle",
          `ctx.runPlay("${play.name}"): this run is that call's child (the same play, input and key): it would wait on itself`,
        );
      const view = await this.#submits.run<RunView>(() => {
        // A turn that comes once the run was stopped (a cancel, its runtime limit) starts nothing: rows queue here.
        this.#scope.signal.throwIfAborted();
        return this.#runs
          .start(childRunId, {
            runId: childRunId,
            org: run.org,
            play: play.name,
            input,
            force: run.force,
            forceToolRefresh: run.forceToolRefresh,
            parentRunId: run.runId,
            depth: run.depth + 1,
            spendFromParent: this.#deps.capped,
          })
          .catch((error: unknown) => {
            throw new InfraError(`could not start child play ${play.name} (${childRunId}): ${messageOf(error)}`, error);
          });
      });
      // A child this run started is its own, whatever became of it (a replay after a crash between start and bind).
      const owned = view.parentRunId === run.runId;
      const stale = options.staleAfterSeconds !== undefined && now() - Date.parse(view.updatedAt) > options.staleAfterSeconds * 1000;
      // Another parent's child being cancelled ends cancelled: it is not waited for, as one that failed is not.
      const ending = isTerminal(view.status) || view.status === "cancelling";
      if (!owned && ending && (view.status !== "completed" || stale)) continue;
      journal.bindChild(entry.key, childRunId, owned, this.#nextCheck(entry));
      this.#scope.emit("child.started", { childRunId, play: play.name, reused: !owned });
      // Started while the run was being stopped (its cancel, its runtime limit): the stop's cancel of its children came
      // before this one was bound, and the run's end cancels it only once the run has wound down.
      if (this.#deps.stopping() && !isTerminal(view.status))
        await this.#runs.cancel(childRunId, run.runId).catch((error: unknown) => {
          this.#scope.log(`could not cancel child run ${childRunId}, started as the run stopped (${messageOf(error)}); its end cancels it`);
        });
      if (isTerminal(view.status)) {
        const error = view.error ? { code: view.error.code, message: view.error.message } : null;
        recordChildEnd(journal, { childRunId, status: view.status as ChildEnd["status"], result: view.result, error }, this.#scope.emit);
      }
      return;
    }
    journal.settle(entry.key, {
      state: "failed",
      error: {
        code: "child_generations_exhausted",
        message: `ctx.runPlay("${play.name}"): ${MAX_CHILD_GENERATIONS} earlier runs of this child failed; pass a new key to start afresh`,
      },
    });
  }

  /**
   * A child past `timeoutMs`: cancelled first (unless another call of this
   * run, or another parent's same call, still waits on it: RunCoordinator.cancel), then its wait fails
   * `child_timeout`. A cancel that fails leaves the wait
   * waiting, to time out again at its next check: failed first, it was never
   * tried again, and the child ran on to its own limits.
   */
  async #timeOut(entry: WaitEntry): Promise<void> {
    const { journal } = this.#deps;
    const ms = entry.timeoutAt! - entry.createdAt;
    // Another call of this run still waits on the child (the same call without a timeout, or a longer one).
    const awaited = entry.childRunId !== null && journal.waitingOn(entry.childRunId).some((other) => other.key !== entry.key);
    if (entry.childRunId && !awaited && journal.get(entry.key)?.state === "waiting") {
      try {
        await this.#scope.faults.check("child.cancel");
        await this.#runs.cancel(entry.childRunId, this.#scope.run.runId);
      } catch (error) {
        this.#scope.log(`could not cancel timed-out child run ${entry.childRunId} (${messageOf(error)}); trying again`);
        journal.setDue(entry.key, this.#scope.now() + this.#deps.policy.childCheckIntervalMs);
        return;
      }
    }
    if (
      !journal.settle(entry.key, {
        state: "failed",
        error: {
          code: "child_timeout",
          message: `child play ${entry.childPlay} (${entry.childRunId}) did not finish within ${ms} ms (timeoutMs)`,
        },
      })
    )
      return;
    this.#scope.emit("child.finished", { childRunId: entry.childRunId, play: entry.childPlay, status: "timeout" });
  }

  /**
   * A child refused by a spend cap: this run's next call would pass it too, so the run stops as its own refused call
   * would stop it (a row's field throwing it trips its attempt's latch). The spend is counted again at its end.
   */
  #capReached(childMessage: string): SpendCapReached {
    const { run } = this.#scope;
    const message = `a child play's provider request would pass a spend cap this run spends under (its maxSpend counts every child's spend; the org's daily limit holds for every run); nothing more was sent: ${childMessage}`;
    return new SpendCapReached(0, run.maxSpend ?? 0, run.maxSpend === null ? "parent" : "maxSpend", message.slice(0, 4000));
  }

  #nextCheck(entry: WaitEntry): number {
    return Math.min(this.#scope.now() + this.#deps.policy.childCheckIntervalMs, entry.timeoutAt ?? Infinity);
  }
}

/** The window of `staleAfterSeconds` a parent started in (its start itself for 0: each parent's child is fresh). */
function staleWindow(staleAfterSeconds: number | undefined, startedAt: number): number | null {
  if (staleAfterSeconds === undefined) return null;
  const ms = staleAfterSeconds * 1000;
  return ms < 1 ? startedAt : Math.floor(startedAt / ms);
}

/** A play's code fingerprint: a new deploy of changed code is a new child identity. */
const fingerprints = new WeakMap<PlayDefinition, Promise<string>>();
function fingerprintOf(play: PlayDefinition): Promise<string> {
  return getOrInsert(fingerprints, play, () => sha256Hex(`${play.run.toString()}\n${play.version ?? ""}`));
}

function checkOptions(name: string, options: RunPlayOptions): void {
  const bad = (what: string) => new TerminalError("invalid_run_play_options", `ctx.runPlay("${name}"): ${what}`);
  if (options.key !== undefined && (typeof options.key !== "string" || options.key.length > 500))
    throw bad("key must be a string of at most 500 characters");
  if (options.timeoutMs !== undefined && !(Number.isFinite(options.timeoutMs) && options.timeoutMs > 0))
    throw bad("timeoutMs must be a positive number");
  if (options.staleAfterSeconds !== undefined && !(Number.isFinite(options.staleAfterSeconds) && options.staleAfterSeconds >= 0))
    throw bad("staleAfterSeconds must be a number ≥ 0");
}

/** At most `limit` tasks at once; the rest queue in order. */
class Semaphore {
  #free: number;
  #queue: (() => void)[] = [];

  constructor(limit: number) {
    this.#free = Math.max(1, limit);
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#queue.push(resolve));
    try {
      return await task();
    } finally {
      const next = this.#queue.shift();
      if (next) next();
      else this.#free++;
    }
  }
}
