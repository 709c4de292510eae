/**
 * What a run owes the runs around it when it ends: it tells each parent that
 * waits on it (`childFinished`), and a run cancelled or failed (its runtime
 * limit included) cancels the children it started and still waits on. Messages may be lost; a parent's alarm asks a
 * child it has not heard from (src/runtime/invocation/child-plays.ts), so one
 * try each; a cancel that fails is tried again by the ended run's alarm. A
 * child another parent still waits on is not cancelled (RunCoordinator.cancel).
 */
import type { ChildEnd } from "./child-plays";
import type { FaultProbe } from "../../clients/faults";
import { RunClient } from "../../clients/runs";
import { messageOf } from "../../core/errors";
import type { JournalStore } from "../../stores/journal-store";
import type { RunStore } from "../../stores/run-store";
import { toCredits } from "../../stores/spend-store";
import { spendsFromCapOf, tellMoves } from "../tools/child-spend";

export interface RunLinksOptions {
  env: Env;
  store: RunStore;
  journal: JournalStore;
  faults: FaultProbe;
  log(line: string): void;
}

/**
 * Tells every parent not yet told that this (terminal) run ended, or told it spent less than it has now, and every
 * parent its allotment moved from what it spent of its cap (running or not). A parent that gave it up (cancelled
 * it) is told only what it spent of that parent's cap, if it spends from it. Returns
 * how many could not be told: the caller tries those again. A parent asks a child it waits on by its alarm, but that
 * ask learns the end, not the spend: a capped parent would count the child's whole allotment for good.
 */
export async function tellParents(o: RunLinksOptions): Promise<number> {
  // A parent this run's allotment moved from is told what it spent of its cap, ended or not (child-spend.ts).
  const unmoved = await tellMoves(o, o.faults);
  const run = o.store.run();
  if (!run || (run.status !== "completed" && run.status !== "failed" && run.status !== "cancelled")) return unmoved;
  // Told again when bills reach this run after its end (an attempt given up on reports at last): a capped parent counts them.
  // Parents that allotted to it before the one allotting now counted their share as it moved (child-spend.ts).
  const spent = o.store.spend.spentWithChildrenMicros() - (o.store.spend.allotmentSource()?.baseMicros ?? 0);
  // Counting a child's allotment (a child cancelled that went on for another parent, say), it may tell less later.
  const provisional = o.store.spend.countsAllotments();
  const end: ChildEnd = {
    childRunId: run.runId,
    status: run.status,
    result: run.result,
    error: run.error ? { code: run.error.code, message: run.error.message } : null,
    spentCredits: toCredits(spent),
    spentProvisional: provisional,
  };
  let untold = 0;
  const runs = new RunClient({ env: o.env, org: run.org });
  // A parent that gave this run up and counts none of its spend (uncapped, or its allotment moved on) has nothing to hear.
  const parents = o.journal.parentsToTell(spent, provisional).filter(({ runId, gaveUp }) => !gaveUp || spendsFromCapOf(o.store, runId));
  await Promise.all(
    parents.map(async ({ runId: parentRunId, again, gaveUp }) => {
      try {
        await o.faults.check("child.finished");
        if (gaveUp) await runs.childSpendMoved(parentRunId, run.runId, spent, provisional);
        else await runs.childFinished(parentRunId, end);
        o.journal.markTold(parentRunId, spent, provisional);
      } catch (error) {
        untold++;
        o.log(
          gaveUp
            ? `could not tell parent run ${parentRunId}, which gave this run up, what it spent of its cap (${messageOf(error)}); tried again shortly`
            : again
              ? `could not tell parent run ${parentRunId} that this run's spend changed since its end (${messageOf(error)}); tried again shortly`
              : `could not tell parent run ${parentRunId} that this run ended (${messageOf(error)}); tried again shortly`,
        );
      }
    }),
  );
  return unmoved + untold;
}

/**
 * A run cancelled or failed cancels the children it still waits on (left,
 * they would run to their own limits with nobody waiting), but for those
 * another parent still waits on (RunCoordinator.cancel); a child cancelled
 * is waited on no more. Returns how many could not be cancelled:
 * the coordinator's alarm tries them again.
 */
export async function cancelChildren(o: RunLinksOptions): Promise<number> {
  const run = o.store.run();
  if (run?.status !== "cancelled" && run?.status !== "failed") return 0;
  let failed = 0;
  await Promise.all(
    o.journal.waitingChildren().map(async (childRunId) => {
      try {
        await o.faults.check("child.cancel");
        await new RunClient({ env: o.env, org: run.org }).cancel(childRunId, run.runId);
        for (const wait of o.journal.waitingOn(childRunId))
          o.journal.settle(wait.key, { state: "failed", error: { code: "cancelled", message: "cancelled with its parent" } });
      } catch (error) {
        failed++;
        o.log(`could not cancel child run ${childRunId} (${messageOf(error)}); trying again`);
      }
    }),
  );
  return failed;
}

/**
 * A cancel's first step: the children this run waits on are cancelled at once, not once this run has wound down
 * (its requests in flight may take minutes, and the children spend meanwhile). Best effort: `cancelChildren`
 * settles their waits, and tries again, when the run has ended.
 */
export async function stopChildren(o: Pick<RunLinksOptions, "env" | "store" | "journal">): Promise<void> {
  const run = o.store.run();
  if (!run) return;
  const runs = new RunClient({ env: o.env, org: run.org });
  await Promise.all(o.journal.waitingChildren().map((child) => runs.cancel(child, run.runId).catch(() => {})));
}
