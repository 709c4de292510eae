/**
 * One alarm of a run's coordinator: checks what the run needs before its play
 * runs (cancel, runtime limit, an interrupted invocation), runs the play once
 * in an {@link Invocation}, and settles the one end it reached. Returns when
 * the alarm should fire again, or null once the run has nothing left to do.
 */
import { isTerminal } from "../../core/statuses";
import { Invocation, type InvocationStart, type RunHost, deadlineExceeded } from "./invocation";
import type { InvocationEnd } from "./invocation-end";
import { retrySalvageOfEndedRun, settle } from "./run-end";

export type { InvocationStart, RunHost } from "./invocation";

export async function driveRun(host: RunHost, start: InvocationStart): Promise<number | null> {
  const run = host.store.run();
  if (!run) return null;
  const invocation = new Invocation(host, start, run);
  if (isTerminal(run.status)) return retrySalvageOfEndedRun(invocation);
  const quiet = await checkChildrenOnly(invocation);
  if (quiet !== null) return quiet;
  const before = await beforePlay(invocation);
  if (before) return settle(invocation, before);
  const play = host.plays.get(run.play)!;
  return settle(invocation, await invocation.play(play));
}

/**
 * A parked run woken with nothing for its play (no entry settled since the play that parked it began, no sleep or
 * wait timeout come): the children whose check has come are asked how they are doing, and unless that settled one,
 * the run parks again without a replay, its alarm at the journal's next deadline. Null: the play runs. A child left
 * waiting by a row another run completed, or one that simply runs long, cost a replay of the play at every check.
 */
async function checkChildrenOnly(inv: Invocation): Promise<number | null> {
  const { store, journal } = inv;
  const quiet = () => {
    const run = store.run()!;
    return (
      run.status === "waiting" &&
      !run.cancelRequested &&
      store.ending() === null &&
      inv.now() < run.deadlineAt &&
      !journal.settledSinceParked() &&
      !journal.othersDue(inv.now())
    );
  };
  if (!quiet()) return null;
  await inv.checkChildren();
  // A cancel, or a message that settled an entry, may have come meanwhile.
  if (!quiet()) return null;
  const { deadlineAt } = store.run()!;
  return Math.min(journal.nextDue() ?? deadlineAt, deadlineAt);
}

/** An end reached before the play runs, or null to run it. */
async function beforePlay(inv: Invocation): Promise<InvocationEnd | null> {
  const { store, run } = inv;
  // The last invocation died carrying out the run's end: this one carries it out, whatever has changed since.
  const ending = store.ending();
  if (ending) {
    inv.log(`finishing the run's end (${ending.kind}) after an interrupted invocation`, "invocation_resumed");
    return ending;
  }
  if (run.cancelRequested) return { kind: "cancelled" };
  if (inv.now() >= run.deadlineAt) return { kind: "failed", error: deadlineExceeded(run) };
  if (run.status === "queued" || run.status === "waiting") {
    store.setStatus("running");
    if (run.status === "queued")
      inv.emit("run.started", { play: run.play, runAttempt: run.runAttempt, parentRunId: run.parentRunId, depth: run.depth });
    await inv.host.onStatus();
  }
  const epoch = store.redispatchRunning();
  if (epoch !== null) {
    // The previous invocation died with chunk attempts in flight: fence them off and redispatch.
    // Counted with infrastructure failures and reset by any invocation that ends normally, so a crash loop ends.
    const interrupted = store.noteInfraFailure(false);
    if (interrupted > inv.policy.maxInterruptedInvocations) {
      return {
        kind: "failed",
        error: {
          code: "crash_loop",
          message: `${interrupted} invocations in a row died with chunks in flight; the run stopped instead of redispatching again. Check the log for what they were doing, then rerun: completed rows and tool results are reused`,
        },
      };
    }
    inv.log(`resuming after an interrupted invocation; chunks in flight are redispatched under attempt ${epoch}`, "invocation_resumed");
  }
  if (!inv.host.plays.has(run.play))
    return { kind: "failed", error: { code: "unknown_play", message: `play "${run.play}" is no longer deployed` } };
  return null;
}
