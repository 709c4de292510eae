/**
 * A run's spend as its org sees it: the daily cap an invocation runs under,
 * the run's billed credits added to the org's day, and a completed run's
 * figures added to its play's history (what estimates learn from). The org's
 * figures live in its OrgDirectory; the run's own in its coordinator's store.
 */
import { isTerminal } from "../../core/statuses";
import type { RunStore } from "../../stores/run-store";
import { toCredits, toMicros } from "../../stores/spend-store";
import type { SpendCap } from "./spend";

import { OrgClient } from "../../clients/orgs";

type DirectoryEnv = Pick<Env, "ORG_DIRECTORY">;

/** This invocation's spend cap: the run's `maxSpend`, or what the org's daily limit leaves, whichever is lower. */
export async function spendCapOf(env: DirectoryEnv, store: RunStore): Promise<SpendCap | null> {
  const run = store.run();
  if (!run || isTerminal(run.status)) return null;
  const own: SpendCap | null = run.maxSpend === null ? null : { credits: run.maxSpend, reason: "maxSpend" };
  let budget: { dailyCredits: number | null; spentToday: number };
  try {
    await reportSpend(env, store);
    budget = await new OrgClient({ env, org: run.org }).spendBudget(Date.now());
  } catch (error) {
    // Without the org's figures the run still holds its own cap; the daily one is checked again next invocation.
    console.warn(`run ${run.runId}: could not read the org's spend budget`, error);
    return own;
  }
  if (budget.dailyCredits === null) return own;
  // The org's day lacks this run's bills a failed report left out: what the day leaves is smaller by them.
  const left = toMicros(budget.dailyCredits - budget.spentToday) - store.spend.unreportedMicros();
  const daily: SpendCap = {
    credits: toCredits(store.spend.committedMicros() + Math.max(0, left)),
    reason: "daily",
    limit: budget.dailyCredits,
  };
  return own === null || daily.credits < own.credits ? daily : own;
}

/** A run that just completed adds what it computed and billed to its play's history (what estimates learn from). */
export async function recordPlayHistory(env: DirectoryEnv, store: RunStore): Promise<void> {
  const run = store.run()!;
  if (run.status !== "completed") return;
  try {
    await new OrgClient({ env, org: run.org }).recordPlayStats({
      runId: run.runId,
      play: run.play,
      rowsComputed: store.computedRows(),
      tools: store.spend.billedByTool(),
    });
  } catch (error) {
    // History only makes estimates better: a run that could not add to it still completed.
    console.warn(`run ${run.runId}: could not add to its play's history`, error);
  }
}

/**
 * Adds the run's newly billed spend to the org's daily totals; false if that
 * could not be done now. The org answers the place it has counted the run's
 * bills up to: past an earlier report whose answer was lost, the bills after
 * it go again.
 */
export async function reportSpend(env: DirectoryEnv, store: RunStore): Promise<boolean> {
  const run = store.run()!;
  const org = new OrgClient({ env, org: run.org });
  for (let round = 0; round < 3; round++) {
    const report = store.spend.unreported();
    if (!report) return true;
    let counted: number;
    try {
      counted = await org.recordSpend({ runId: run.runId, ...report });
    } catch (error) {
      console.warn(`run ${run.runId}: could not report its spend to the org`, error);
      return false;
    }
    store.spend.markReported(counted);
  }
  return store.spend.unreported() === null;
}
