/**
 * How an invocation ends: one value, decided once from what the invocation
 * knows when the play returns or throws, and acted on once (run-end.ts).
 */
import { codeOf, cutText, detailsOf, messageOf } from "../../core/errors";
import type { RunError } from "../../stores/run-store";
import { WaitSignal } from "./waits";
import { InfraError, YieldSignal } from "./yield";

/** The one way an invocation ends. */
export type InvocationEnd =
  /** The play returned: the run completed with its result. */
  | { kind: "completed"; result: unknown }
  /** The run failed: the play threw, hit its runtime limit, or the runtime gave up retrying. */
  | { kind: "failed"; error: RunError }
  /** A cancel was asked for: the run ends `cancelled`. */
  | { kind: "cancelled" }
  /**
   * The run waits (a wait, a sleep, a child) until `resumeAt` or a message.
   * `chunksStopped`: a row's child made the invocation yield mid-map, so its
   * chunks in flight were stopped (not lost) and go back to pending.
   */
  | { kind: "parked"; resumeAt: number; chunksStopped: boolean }
  /**
   * The invocation stopped early (its subrequest budget, rows leased elsewhere); the run goes on at `resumeAt`.
   * `chunksStopped` as for `parked` (a map the play left running, stopped with the invocation).
   */
  | { kind: "yielded"; resumeAt: number; chunksStopped?: boolean }
  /** Storage could not be reached: the next alarm tries again at `at`. */
  | { kind: "retry"; at: number; error: InfraError };

/** What stopped this invocation besides the play's own throw, read once when it threw. */
export interface Stops {
  /** A cancel was asked for (the coordinator aborted the invocation, or the run records the request). */
  cancelled: boolean;
  /** The run's error, when its runtime limit passed during this invocation. */
  deadline: RunError | null;
  /** A row's child runs long: the invocation yielded so the map goes on when the child ends, at this time at the latest. */
  suspendedUntil: number | null;
  /** The play waits (a wait, a sleep, a child) although it may have caught the signal: until then. */
  parkedUntil: number | null;
  /** After an infrastructure failure: when to try again, or null once retries are spent. */
  retryAt(): number | null;
}

/**
 * The end of an invocation whose play left maps running (a `Promise.all` of maps, one of which threw): they stop with
 * it, so the chunks they had in flight were stopped, not lost, and go back to pending now (the next invocation would
 * take them for an interrupted one's).
 */
export function withMapsStopped(end: InvocationEnd): InvocationEnd {
  return end.kind === "parked" || end.kind === "yielded" ? { ...end, chunksStopped: true } : end;
}

/** The play returned; one that caught a wait's signal has not really ended: it waits. */
export function endAfterReturn(result: unknown, parkedUntil: number | null): InvocationEnd {
  if (parkedUntil !== null) return { kind: "parked", resumeAt: parkedUntil, chunksStopped: false };
  return { kind: "completed", result: result ?? null };
}

/**
 * The play threw. Most decisive first: the runtime limit (unless a cancel came
 * too: the run is then cancelled, as asked); a wait the play is parked on
 * (unless cancelled); a yield (the invocation's budget, blocked rows, a wait
 * not due: the next alarm goes on, and a cancel is seen there); a row's child
 * running long (unless cancelled); the cancel; an infrastructure failure
 * (retried while retries remain); anything else fails the run.
 */
export function endAfterThrow(error: unknown, stops: Stops): InvocationEnd {
  const chunksStopped = stops.suspendedUntil !== null;
  if (stops.deadline && !stops.cancelled) return { kind: "failed", error: stops.deadline };
  if (stops.parkedUntil !== null && !(error instanceof YieldSignal) && !stops.cancelled) {
    return { kind: "parked", resumeAt: stops.parkedUntil, chunksStopped };
  }
  if (error instanceof YieldSignal) {
    if (error instanceof WaitSignal || chunksStopped) return { kind: "parked", resumeAt: error.resumeAt, chunksStopped };
    return { kind: "yielded", resumeAt: error.resumeAt };
  }
  if (stops.suspendedUntil !== null && !stops.cancelled) {
    return { kind: "parked", resumeAt: stops.suspendedUntil, chunksStopped: true };
  }
  if (stops.cancelled) return { kind: "cancelled" };
  if (error instanceof InfraError) {
    const at = stops.retryAt();
    return at === null ? { kind: "failed", error: runErrorOf(error) } : { kind: "retry", at, error };
  }
  return { kind: "failed", error: runErrorOf(error) };
}

/**
 * The longest message a run's error keeps: it is stored in one SQLite value (2 MB at most), with its other parts.
 * Generous: the run's end redacts secrets from what is kept, and a cut through one would leave its first part.
 */
export const MAX_RUN_ERROR_MESSAGE = 64 * 1024;
/** Characters of `details` (as JSON) a run's error keeps; larger details are left out. */
const MAX_RUN_ERROR_DETAILS = 16 * 1024;
const MAX_RUN_ERROR_CODE = 100;

/**
 * A failure as the run's error: its code (play_failed when it has none), message and details, cut to fit (a play that
 * throws a message quoting a large response: stored whole, the run could never end).
 */
export function runErrorOf(error: unknown): RunError {
  const details = detailsOf(error);
  const message = messageOf(error);
  return {
    code: (codeOf(error) ?? "play_failed").slice(0, MAX_RUN_ERROR_CODE),
    message: cutText(message, MAX_RUN_ERROR_MESSAGE),
    ...(details && JSON.stringify(details).length <= MAX_RUN_ERROR_DETAILS ? { details } : {}),
  };
}
