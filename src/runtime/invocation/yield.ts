/**
 * How an invocation stops early without the run ending. The play's own code
 * sits between the point that stops and the driver, so the only way back to
 * the driver is to throw through it: these are the two things thrown.
 */
import { TroupeError } from "../../core/errors";

/** Ends this invocation; the alarm resumes the run at `resumeAt` (the play replays from the top). */
export class YieldSignal extends Error {
  constructor(
    readonly resumeAt: number,
    reason: string,
  ) {
    super(`yield: ${reason}`);
  }
}

/** A storage actor could not be reached: retry the invocation, do not fail the run. */
export class InfraError extends TroupeError {
  constructor(message: string, cause: unknown) {
    super("infrastructure_unavailable", message, { cause });
  }
}
