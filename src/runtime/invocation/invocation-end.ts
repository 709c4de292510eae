/**
 * How an invocation ends when the play's code threw: one decision, made from
 * what this invocation knows at that point, in one documented order. The
 * driver acts on the answer once (run-driver.ts).
 */
import { InfraError, YieldSignal } from "./yield";
import { WaitSignal } from "./waits";

/** What stopped this invocation besides the play's own throw, read once when it threw. */
export interface Stops {
  /** A cancel was asked for (the coordinator aborted the invocation, or the run records the request). */
  cancelled: boolean;
  /** The run's runtime limit passed during this invocation. */
  deadline: boolean;
  /** A row's child runs long: the invocation yielded so the map goes on when the child ends, at this time at the latest. */
  suspendedUntil: number | null;
  /** The play waits (a wait, a sleep, a child) although it may have caught the signal: until then. */
  parkedUntil: number | null;
}

/** The decision; the driver turns `deadline` and `failed` into the run's error and `infra` into a retry or a failure. */
export type ThrownEnd =
  | { kind: "deadline" }
  | { kind: "parked"; resumeAt: number; waiting: boolean; suspended: boolean }
  | { kind: "cancelled" }
  | { kind: "infra"; error: InfraError }
  | { kind: "failed"; error: unknown };

/**
 * Most decisive first: the runtime limit (unless a cancel came too: the run is
 * then cancelled, as asked); a wait the play is parked on (unless cancelled);
 * a yield (the invocation's budget, blocked rows, a wait not due: the next
 * alarm goes on, and a cancel is seen there); a row's child running long
 * (unless cancelled); the cancel; an infrastructure failure (retried by the
 * driver); anything else fails the run.
 */
export function endAfterThrow(error: unknown, stops: Stops): ThrownEnd {
  const suspended = stops.suspendedUntil !== null;
  if (stops.deadline && !stops.cancelled) return { kind: "deadline" };
  if (stops.parkedUntil !== null && !(error instanceof YieldSignal) && !stops.cancelled) {
    return { kind: "parked", resumeAt: stops.parkedUntil, waiting: true, suspended };
  }
  if (error instanceof YieldSignal) {
    return { kind: "parked", resumeAt: error.resumeAt, waiting: error instanceof WaitSignal || suspended, suspended };
  }
  if (stops.suspendedUntil !== null && !stops.cancelled) {
    return { kind: "parked", resumeAt: stops.suspendedUntil, waiting: true, suspended: true };
  }
  if (stops.cancelled) return { kind: "cancelled" };
  if (error instanceof InfraError) return { kind: "infra", error };
  return { kind: "failed", error };
}
