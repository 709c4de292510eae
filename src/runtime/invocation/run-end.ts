/**
 * What an invocation's end does to its run: {@link settle} switches on the
 * one {@link InvocationEnd} and returns when the coordinator's alarm should
 * fire next (null once nothing is left to do).
 */
import { faultProbeFor } from "../../clients/faults";
import { ReceiptClient, SheetClient } from "../../clients/shards";
import type { RunEnding, RunError, RunStore } from "../../stores/run-store";
import { MAX_RESTORE_TRIES } from "../../stores/salvage-store";
import { toCredits } from "../../stores/spend-store";
import { restoreSalvage } from "../tools/salvage";
import type { Invocation } from "./invocation";
import type { InvocationEnd } from "./invocation-end";
import { decideEnd } from "./decided-end";

/** Acts on how the invocation ended; the alarm's next time, or null. */
export async function settle(inv: Invocation, end: InvocationEnd): Promise<number | null> {
  // An invocation that ends normally ends a run of infrastructure failures (and of interrupted invocations).
  if (end.kind !== "retry") inv.store.noteInfraFailure(true);
  switch (end.kind) {
    case "completed":
    case "failed":
    case "cancelled":
      // Stored already when the play decided it (Invocation.play): stored again, the same, it is checked as kept.
      return finish(
        inv,
        decideEnd(inv.store, end, (value) => inv.secrets.redactDeep(value)),
      );
    case "parked":
      return park(inv, end.resumeAt, { waiting: true, chunksStopped: end.chunksStopped });
    case "yielded":
      return park(inv, end.resumeAt, { waiting: false, chunksStopped: end.chunksStopped === true });
    case "retry":
      // Counted as an infrastructure failure already: the chunks it left running go back under a new epoch now, so
      // the next invocation does not count it again as one that died with chunks in flight.
      inv.store.redispatchRunning();
      // Not past the run's limit: the alarm then fails it, on time.
      return Math.min(end.at, inv.store.run()!.deadlineAt);
  }
}

/**
 * Parks the run: `waiting` when it waits on the journal (a wait, a sleep, a
 * child), and the alarm at the earliest of its deadlines and the run's limit.
 * After a row's child made the invocation yield, the chunks it stopped go
 * back to pending under a new epoch: they were stopped, not lost, so the
 * next invocation does not count them as an interrupted one.
 */
async function park(inv: Invocation, resumeAt: number, how: { waiting: boolean; chunksStopped: boolean }): Promise<number> {
  const { store } = inv;
  if (how.chunksStopped && store.redispatchRunning() !== null) await releaseLeases(inv, { ended: false });
  const due = inv.journal.nextDue();
  const at = Math.min(resumeAt, due ?? resumeAt, store.run()!.deadlineAt);
  if (how.waiting) {
    // A later alarm for a child's check only, with nothing settled since this play began, re-parks without it (run-driver.ts);
    // unless the park stopped a map's chunks (a row's child ran long): the map's other rows go on at each check.
    inv.journal.notePark(how.chunksStopped ? null : inv.settlesAtStart);
    store.setStatus("waiting");
    await inv.host.onStatus();
  }
  return at;
}

/**
 * Ends the run: writes salvage back into receipts if it can, releases its
 * leases, records the outcome (salvage included), appends the terminal event.
 * Returns when the alarm should retry the salvage still pending, else null.
 */
async function finish(inv: Invocation, outcome: RunEnding): Promise<number | null> {
  const { store, meter } = inv;
  const status = outcome.kind;
  // Decided and stored: an invocation that dies from here on (its leases released and fenced, say) leaves this end to the next.
  await inv.faults.check("run.finish");
  const restore = store.salvage.pendingCount() > 0 ? await restoreSalvage(store.salvage, receiptClient(inv)) : null;
  if (status !== "completed") await releaseLeases(inv, { ended: true });
  const result = outcome.kind === "completed" ? outcome.result : undefined;
  const raw =
    outcome.kind === "failed"
      ? { ...outcome.error, ...spentAtEnd(store, outcome.error), failureSamples: store.failureSamples() }
      : undefined;
  const redacted = raw && inv.host.redact(raw);
  // Salvage is attached after redaction: it holds the exact billed outputs.
  const salvage = store.salvage.record();
  const error = redacted && salvage ? { ...redacted, message: `${redacted.message}; ${salvageSummary(salvage)}`, salvage } : redacted;
  if (restore?.failure) inv.log(`salvage could not be written back into receipts yet (${restore.failure}); retrying by alarm`);
  // Counted before the terminal status is visible, so a reader of the finished run sees all of it.
  store.addUsage(meter);
  meter.rpc = meter.provider = meter.retries = meter.rateLimited = meter.lookups = meter.outcomeUnknown = 0;
  // Nothing runs once the run has ended: chunks still marked running show as not computed, not active;
  // requests reserved but never answered are not this run's spend (a run that completes them pays).
  store.resetRunningChunks();
  store.spend.releaseAll();
  await inv.faults.check("run.report");
  await inv.host.reportSpend();
  store.setStatus(status, { result, error });
  store.setEnding(null);
  const progress = store.allProgress();
  if (status === "completed") inv.emit("run.completed", { result: result ?? null, progress });
  // A failed run always ends with an error (every failed end carries one).
  else if (status === "failed") inv.emit("run.failed", { error: error!, progress });
  else inv.emit("run.cancelled", { progress });
  // Salvage an executor reported while the end was carried out (the run not ended yet, nothing woke for it) is
  // written back by the ended run's alarm, as salvage reported after the end is.
  const salvagePending = store.salvage.pendingCount() > 0;
  // The directory is told by this alarm's last step too (RunCoordinator): its failure must not skip telling children
  // and parents, or the spend report.
  await inv.host.onStatus().catch(() => {});
  return salvagePending ? inv.now() + restoreDelayMs(inv, 0) : null;
}

/** A finished run with salvage still pending: try to write it into its receipts again (by alarm, with backoff). */
export async function retrySalvageOfEndedRun(inv: Invocation): Promise<number | null> {
  const { store } = inv;
  if (store.salvage.pendingCount() === 0) return null;
  const tries = store.salvage.restoreTries();
  if (tries >= MAX_RESTORE_TRIES) {
    inv.log(
      `gave up writing salvage back into receipts after ${tries} tries; it stays in this run's error (outputs past its size, error.salvage's outputOmitted, in the run's storage only)`,
    );
    return null;
  }
  const { pending, failure } = await restoreSalvage(store.salvage, receiptClient(inv));
  if (pending > 0) return inv.now() + restoreDelayMs(inv, tries + 1);
  const record = store.salvage.record()!;
  inv.emit("salvage.restored", {
    total: record.total,
    restored: record.restored,
    superseded: record.superseded,
    ...(failure ? { lastFailure: failure } : {}),
  });
  return null;
}

/** A run stopped by its cap reports what it billed in the end, its children's spend included (requests in flight at the refusal were billed after it). */
function spentAtEnd(store: RunStore, error: RunError): Partial<RunError> {
  if (error.code !== "spend_cap_reached" || !error.details) return {};
  return { details: { ...error.details, spent: toCredits(store.spend.spentWithChildrenMicros()) } };
}

function salvageSummary(salvage: NonNullable<ReturnType<RunStore["salvage"]["record"]>>): string {
  return `${salvage.total} billed provider outputs could not be stored in their receipts and are kept as salvage on this run (${salvage.restored} written back since, ${salvage.pending} pending)`;
}

/** Receipts for writing salvage back: faults may fail these calls, but never crash the coordinator mid-end. */
function receiptClient(inv: Invocation): ReceiptClient {
  const { env, run, policy, meter } = inv;
  return new ReceiptClient({ env, org: run.org, shardCount: policy.receiptShards, meter, faults: faultProbeFor(env) });
}

function restoreDelayMs(inv: Invocation, tries: number): number {
  const ladder = inv.policy.salvageRestoreRetryMs;
  return ladder[Math.min(tries, ladder.length - 1)]!;
}

/**
 * Frees the leases the run holds so an immediate rerun is not blocked: its
 * row leases, and at its end its receipt leases too. A run parked while its
 * map waits on children frees only its row leases (the chunks claim their
 * rows again when it goes on); its receipts stay leased, as a provider call
 * may still be in flight. The sheet shards then refuse claims of the epochs
 * that ran (every one, at the end): an attempt an executor still holds
 * unstarted cannot lease the rows again.
 */
async function releaseLeases(inv: Invocation, at: { ended: boolean }): Promise<void> {
  const { run, store, meter } = inv;
  // Parked, the epoch was bumped already; at the end, no epoch of the run runs again.
  const fenceBelow = store.run()!.runAttempt + (at.ended ? 1 : 0);
  const releases: Promise<number>[] = [];
  if (at.ended)
    releases.push(new ReceiptClient({ env: inv.env, org: run.org, shardCount: inv.policy.receiptShards, meter }).releaseRun(run.runId));
  for (const name of Object.keys(store.allProgress())) {
    const location = { org: run.org, play: run.play, dataset: name, shardCount: store.map(name)!.shardCount };
    releases.push(new SheetClient({ env: inv.env, meter, location }).releaseRun(run.runId, fenceBelow));
  }
  const failed = (await Promise.allSettled(releases)).filter((r) => r.status === "rejected").length;
  if (failed) inv.log(`could not release leases on ${failed} shards; they expire by themselves`);
}
