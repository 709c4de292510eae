/**
 * Durable waits for plays: `ctx.sleep` and `ctx.waitForEvent` over the
 * coordinator's journal. A wait that has not ended never settles in this
 * invocation, and the invocation ends ({@link Waits.held}): the run is
 * `waiting`, and the coordinator's one alarm is set to the journal's earliest
 * deadline. No timer stays alive meanwhile; a signal (or a child's end)
 * re-arms the alarm. The replayed play finds the entry ended and goes on.
 *
 * Entries are keyed by the call's place in the play, which the effects funnel
 * gives it (effects.ts): `sleep:0`, `event:approve:1`.
 */
import type { JournalStore, WaitEntry, WaitKind } from "../../stores/journal-store";
import type { RunRecord } from "../../stores/run-store";
import { isTerminal } from "../../core/statuses";
import { TerminalError } from "../../core/errors";
import { canonicalJson } from "../../core/hash";
import { TestPolicyOverrides } from "../../core/policy";
import { YieldSignal } from "./yield";
import type { Emit } from "../../contracts/events";
import type { SignalRefusal } from "../../contracts/runs";
import type { EffectCall } from "./effects";

/** Ends the invocation because the play waits: the run is `waiting` until `resumeAt` or a message. */
export class WaitSignal extends YieldSignal {}

/** The knobs of child plays and waits (production defaults; the test runner shortens them). */
export interface WaitPolicy {
  /** Deepest nesting of child plays: a run submitted over HTTP is depth 0. */
  maxPlayDepth: number;
  /** Child plays one run may start (reused children count too). */
  maxChildrenPerRun: number;
  /** Child submits (start RPCs) in flight at once per invocation. */
  childSubmitConcurrency: number;
  /** While it waits on a child, the parent's alarm asks it this often (in case its message was lost). */
  childCheckIntervalMs: number;
  /** How long a row inside `ctx.map` waits in process for its child before its chunk yields. */
  childInlineWaitMs: number;
}

const production: WaitPolicy = {
  maxPlayDepth: 5,
  maxChildrenPerRun: 1000,
  childSubmitConcurrency: 16,
  childCheckIntervalMs: 60_000,
  childInlineWaitMs: 30_000,
};

const test: WaitPolicy = {
  maxPlayDepth: 3,
  maxChildrenPerRun: 25,
  childSubmitConcurrency: 4,
  childCheckIntervalMs: 1_000,
  childInlineWaitMs: 500,
};

/** Production's, or under the test runner the test policy with the run's own overrides on top. */
export function waitPolicyFor(env: Env, overrides?: Record<string, number> | null): WaitPolicy {
  if (env.TROUPE_TEST_MODE !== "on") return production;
  const own = overrides ? TestPolicyOverrides.parse(overrides) : {};
  return own.childCheckIntervalMs === undefined ? test : { ...test, childCheckIntervalMs: own.childCheckIntervalMs };
}

/** An event key: what `POST /v1/runs/<id>/signals/<eventKey>` and `ctx.waitForEvent` name. */
export const EVENT_KEY = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;

/** The longest single wait or sleep: a run's own runtime limit ends it sooner anyway. */
const MAX_WAIT_MS = 30 * 24 * 3600 * 1000;

export interface WaitsOptions {
  journal: JournalStore;
  now(): number;
  emit: Emit;
  /** When the run's runtime limit ends it: the latest the alarm need be set. */
  deadlineAt: number;
}

export class Waits {
  #deps: WaitsOptions;
  /**
   * Set once any call parked in this invocation. The play cannot have ended
   * in an invocation where a wait was not ready, even if it caught the
   * signal: the driver parks the run anyway.
   */
  parked: WaitSignal | null = null;
  /**
   * Rejects with the park of the first wait, sleep or child of this invocation that has not come ({@link hold}): the
   * driver races it with the play, and ends the invocation once the play can go on only through calls held. A held call
   * never settles in this invocation, so no code of the play runs on as though it had come (a catch-all around it
   * would take the park for a failure and bill its fallback).
   */
  readonly held: Promise<never>;
  /** How many calls of this invocation were held ({@link hold}): each never settles in it. */
  holds = 0;
  #hold!: (signal: WaitSignal) => void;
  #holdWaiters: (() => void)[] = [];

  constructor(options: WaitsOptions) {
    this.#deps = options;
    this.held = new Promise<never>((_resolve, reject) => {
      this.#hold = reject;
    });
    // Answered by the driver's race; an invocation that ends before any wait parks leaves it pending.
    this.held.catch(() => {});
  }

  async sleep(ms: number, call: EffectCall): Promise<void> {
    checkDuration("ctx.sleep", ms);
    const key = `sleep:${call.ordinal}`;
    const entry = this.#entry(key, "sleep", { dueInMs: ms, timeoutMs: null });
    if (entry.state !== "waiting") return;
    if (this.#deps.now() < entry.dueAt!) return this.#wait(`sleeping until ${new Date(entry.dueAt!).toISOString()}`);
    if (this.#deps.journal.settle(key, { state: "done", result: null }))
      this.#deps.emit("wait.finished", { kind: "sleep", key, outcome: "elapsed" });
  }

  async waitForEvent<T>(eventKey: string, call: EffectCall, options: { timeoutMs?: number } = {}): Promise<T> {
    if (typeof eventKey !== "string" || !EVENT_KEY.test(eventKey)) {
      throw new TerminalError(
        "invalid_event_key",
        `ctx.waitForEvent: event key ${JSON.stringify(eventKey)} must match ${EVENT_KEY.source}`,
      );
    }
    if (options.timeoutMs !== undefined) checkDuration("ctx.waitForEvent timeoutMs", options.timeoutMs);
    const { journal, now } = this.#deps;
    const key = `event:${eventKey}:${call.ordinal}`;
    const timeoutMs = options.timeoutMs ?? null;
    let entry = this.#entry(key, "event", { dueInMs: timeoutMs, timeoutMs, eventKey });
    if (entry.state === "waiting") {
      // A signal sent before the wait began is kept for it (one sent after its timeout is not its own).
      const early = journal.openSignal(eventKey, entry.timeoutAt);
      if (early && journal.consumeSignal(early.seq, key, early.data)) {
        this.#deps.emit("wait.finished", { kind: "event", key, eventKey, outcome: "signal" });
        entry = journal.get(key)!;
      }
    }
    if (entry.state === "waiting" && entry.timeoutAt !== null && now() >= entry.timeoutAt) {
      const error = {
        code: "event_timeout",
        message: `ctx.waitForEvent("${eventKey}") got no signal within ${entry.timeoutAt - entry.createdAt} ms`,
      };
      if (journal.settle(key, { state: "failed", error }))
        this.#deps.emit("wait.finished", { kind: "event", key, eventKey, outcome: "timeout" });
      entry = journal.get(key)!;
    }
    if (entry.state === "done") return entry.result as T;
    if (entry.state === "failed") throw new TerminalError(entry.error!.code, entry.error!.message);
    return this.#wait(`waiting for the signal "${eventKey}"`);
  }

  /**
   * A play-level call that must wait (a wait or sleep that has not come, a child still running): the invocation ends
   * ({@link held}), and the caller leaves the call unsettled in it.
   */
  hold(reason: string): void {
    this.holds++;
    this.#hold(this.#park(reason));
    for (const wake of this.#holdWaiters.splice(0)) wake();
  }

  /** Resolves at the next call held ({@link hold}). */
  nextHold(): Promise<void> {
    return new Promise((resolve) => this.#holdWaiters.push(resolve));
  }

  /** A wait or sleep that has not come: the invocation ends ({@link held}), and the call never settles in it. */
  #wait(reason: string): Promise<never> {
    this.hold(reason);
    return never();
  }

  #park(reason: string): WaitSignal {
    const due = this.#deps.journal.nextDue();
    const signal = new WaitSignal(Math.min(due ?? this.#deps.deadlineAt, this.#deps.deadlineAt), reason);
    this.parked ??= signal;
    return signal;
  }

  /** The journal entry of this call: found on a replay, else opened now. */
  #entry(key: string, kind: WaitKind, fields: { dueInMs: number | null; timeoutMs: number | null; eventKey?: string }): WaitEntry {
    const found = this.#deps.journal.get(key);
    if (found) {
      if (found.kind !== kind)
        throw new TerminalError(
          "nondeterministic_play",
          `wait ${key} was a ${found.kind} when first run but is a ${kind} on replay; play code must be deterministic outside ctx`,
        );
      return found;
    }
    const entry = this.#deps.journal.open({ key, kind, ...fields });
    this.#deps.emit("wait.started", {
      kind,
      key,
      ...(fields.eventKey ? { eventKey: fields.eventKey } : {}),
      dueAt: entry.dueAt === null ? null : new Date(entry.dueAt).toISOString(),
    });
    return entry;
  }
}

/** Why `run` refuses a signal now, or null when it takes one (`ending`: it carries out an end it decided). */
export function signalRefusal(run: RunRecord, ending: boolean, now: number): SignalRefusal | null {
  if (isTerminal(run.status)) return "ended";
  if (run.cancelRequested) return "cancelling";
  if (ending) return "ending";
  return run.deadlineAt <= now ? "past_limit" : null;
}

/** Whether a retried delivery carries what `earlier` did: its key, and its data in any key order (as a run submit's fingerprint reads it). */
export function sameDelivery(earlier: { eventKey: string; dataJson: string }, eventKey: string, data: unknown): boolean {
  return earlier.eventKey === eventKey && canonicalJson(JSON.parse(earlier.dataJson)) === canonicalJson(data ?? null);
}

/**
 * Delivers a signal to the run: the oldest wait on `eventKey` takes it now,
 * or it is kept for the next wait on that key.
 */
export function deliverSignal(
  journal: JournalStore,
  eventKey: string,
  data: unknown,
  dedupeKey: string | null,
  now: number,
): { consumedBy: string | null; duplicate: boolean } {
  const { seq, duplicate } = journal.addSignal(eventKey, JSON.stringify(data ?? null), dedupeKey);
  if (duplicate) return { consumedBy: null, duplicate };
  const waiting = journal.waitingFor(eventKey, now);
  if (waiting && journal.consumeSignal(seq, waiting.key, data ?? null)) return { consumedBy: waiting.key, duplicate };
  return { consumedBy: null, duplicate };
}

/** A promise that never settles, one per parked call: a shared one would keep every parked play's frame alive in its reactions. */
export function never(): Promise<never> {
  return new Promise<never>(() => {});
}

function checkDuration(what: string, ms: unknown): void {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0 || ms > MAX_WAIT_MS) {
    throw new TerminalError("invalid_wait", `${what} needs a number of milliseconds from 0 to ${MAX_WAIT_MS}, not ${String(ms)}`);
  }
}
