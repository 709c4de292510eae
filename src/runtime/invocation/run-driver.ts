/**
 * One invocation of a run: replays the play from the top (completed work comes
 * back from storage without cost), and decides what happens next. Returns when
 * the coordinator's alarm should fire again, or null once the run is terminal.
 */
import { createDispatchServices } from "../tools/services";
import { ChildPlays, type ChildWaiters } from "./child-plays";
import { MapRunner } from "../map/map-runner";
import type { YieldSignal } from "./yield";
import { endAfterThrow, type Stops } from "./invocation-end";
import { RunContext, type PlayServices } from "./play-context";
import { PlayFetch, SecretValues } from "./play-fetch";
import { WaitSignal, Waits, waitPolicyFor } from "./waits";
import type { RuntimePolicy } from "../../core/policy";
import { SubrequestMeter } from "../../core/meter";
import { ReceiptClient, SheetClient } from "../../clients/shards";
import { isTerminal } from "../../core/statuses";
import { restoreSalvage } from "../tools/salvage";
import type { PlayDefinition, AnyTool } from "../../play/types";
import { codeOf, detailsOf, messageOf, TroupeError } from "../../core/errors";
import { type SpendCap, SpendCapReached, type SpendLedger } from "../tools/spend";
import { toCredits, toMicros } from "../../stores/spend-store";
import { faultProbeFor, type FaultProbe } from "../../clients/faults";
import type { JournalStore } from "../../stores/journal-store";
import type { RunError, RunRecord, RunStore } from "../../stores/run-store";
import { MAX_RESTORE_TRIES } from "../../stores/salvage-store";
import type { Emit } from "../../contracts/events";

export interface DriveOptions {
  env: Env;
  store: RunStore;
  /** The run's waits: child plays, events, sleeps, signals. */
  journal: JournalStore;
  /** In-process waits of rows for their children's messages. */
  waiters: ChildWaiters;
  policy: RuntimePolicy;
  plays: ReadonlyMap<string, PlayDefinition>;
  tools: ReadonlyMap<string, AnyTool>;
  signal: AbortSignal;
  now(): number;
  /** Appends to the ledger (and tells watchers). */
  emit: Emit;
  /** The run's status changed: tell the org's directory. */
  onStatus(): Promise<void>;
  /**
   * Adds what the run billed to its org's day, before the run shows as ended:
   * whoever sees it ended sees its spend in the org's totals and daily limit.
   * False when the org could not be told now (a later alarm tells it).
   */
  reportSpend?(): Promise<boolean>;
  /** Subrequests spent by this invocation (for the bench and the budget). */
  meter?: SubrequestMeter;
  /** Removes secrets a failure message may quote, before the run's error is stored. */
  redact?<T>(value: T): T;
  /** The test-only fault seam (defaults to `faultProbeFor(env)`; the coordinator's can crash it). */
  faults?: FaultProbe;
  /** The most the run may have reserved and billed by the end of this invocation, or null for no cap. */
  spendCap?: SpendCap | null;
}

const MAX_INFRA_RETRIES = 6;
const MAX_LOG_LINE = 4000;

export async function driveRun(o: DriveOptions): Promise<number | null> {
  const { store, now } = o;
  let run = store.run();
  if (!run) return null;
  if (isTerminal(run.status)) return retrySalvageOfEndedRun(o);
  if (run.cancelRequested) return finish(o, "cancelled", {});
  if (now() >= run.deadlineAt) return finish(o, "failed", { error: deadlineExceeded(run) });
  if (run.status === "queued" || run.status === "waiting") {
    store.setStatus("running");
    if (run.status === "queued")
      o.emit("run.started", { play: run.play, runAttempt: run.runAttempt, parentRunId: run.parentRunId, depth: run.depth });
    await o.onStatus();
  }
  if (store.runningChunks() > 0) {
    // The previous invocation died with chunk attempts in flight: fence them off and redispatch.
    store.resetRunningChunks();
    const epoch = store.bumpAttempt();
    // Counted with infrastructure failures and reset by any invocation that ends normally, so a crash loop ends.
    const interrupted = store.noteInfraFailure(false);
    if (interrupted > o.policy.maxInterruptedInvocations) {
      return finish(o, "failed", {
        error: {
          code: "crash_loop",
          message: `${interrupted} invocations in a row died with chunks in flight; the run stopped instead of redispatching again. Check the log for what they were doing, then rerun: completed rows and tool results are reused`,
        },
      });
    }
    o.emit("log.appended", { line: `resuming after an interrupted invocation; chunks in flight are redispatched under attempt ${epoch}` });
  }
  run = store.run()!;
  const play = o.plays.get(run.play);
  if (!play) return finish(o, "failed", { error: { code: "unknown_play", message: `play "${run.play}" is no longer deployed` } });

  const log = (line: string) => o.emit("log.appended", { line: line.slice(0, MAX_LOG_LINE) });
  const meter = o.meter ?? new SubrequestMeter();
  // A row whose child runs long stops this invocation the way a cancel would, except that the run goes on (waiting).
  const suspension = new AbortController();
  // The runtime limit holds inside an invocation too: at the deadline the run stops as a cancel would, then fails.
  const limit = new AbortController();
  const limitTimer = setTimeout(
    () => limit.abort(new TroupeError("deadline_exceeded", deadlineExceeded(run!).message)),
    Math.max(0, run.deadlineAt - now()),
  );
  const signal = AbortSignal.any([o.signal, suspension.signal, limit.signal]);
  const dispatch = createDispatchServices({
    env: o.env,
    run,
    tools: o.tools,
    policy: o.policy,
    signal,
    meter,
    faults: o.faults ?? faultProbeFor(o.env),
    log,
    now,
    // Synchronous, in the coordinator's own storage: billed data is durable before the call's error propagates.
    salvage: (entry) => store.salvage.add(entry),
    spend: spendLedger(store, o.spendCap ?? null),
  });
  const maps = new MapRunner({ env: o.env, run, store, policy: o.policy, tools: o.tools, meter, signal, log, emit: o.emit, now, dispatch });
  const services = playServices(o, run, { signal, suspension, meter, log });
  const ctx = new RunContext({ runId: run.runId, org: run.org, maps, attemptSeq: () => store.run()!.runAttempt, log, services });
  let end: InvocationEnd;
  try {
    await services.children.checkDue();
    end = await drivePlay(o, play, ctx, log, services, suspension.signal, limit.signal);
  } finally {
    clearTimeout(limitTimer);
    await dispatch.pacers.closeAll();
  }
  // Ended only now: what the invocation spent (its pacers' release included) is counted before a terminal status shows.
  switch (end.kind) {
    case "finished":
      return finish(o, end.status, end.outcome);
    case "parked":
      return park(o, end.resumeAt, end.waiting, end.suspended);
    case "retry":
      return end.at;
  }
}

/** How the play's invocation ended, decided once and acted on once. */
type InvocationEnd =
  | { kind: "finished"; status: "completed" | "failed" | "cancelled"; outcome: { result?: unknown; error?: RunError } }
  | { kind: "parked"; resumeAt: number; waiting: boolean; suspended: boolean }
  | { kind: "retry"; at: number };

/** The run's ledger of billable requests, over its coordinator's storage, under `cap`. */
function spendLedger(store: RunStore, cap: SpendCap | null): SpendLedger {
  const capMicros = cap === null ? null : toMicros(cap.credits);
  return {
    reserve: (request) => {
      if (store.spend.reserve(request, capMicros)) return;
      const spent = toCredits(store.spend.billedMicros());
      throw cap!.reason === "maxSpend" ? new SpendCapReached(spent, cap!.credits) : new SpendCapReached(spent, cap!.limit, "daily");
    },
    bill: (requestKey) => store.spend.bill(requestKey),
    release: (requestKey) => store.spend.release(requestKey),
  };
}

/** Child plays, waits and fetch for this invocation. */
function playServices(
  o: DriveOptions,
  run: RunRecord,
  invocation: { signal: AbortSignal; suspension: AbortController; meter: SubrequestMeter; log(line: string): void },
): PlayServices {
  const waits = new Waits({ journal: o.journal, now: o.now, emit: o.emit, deadlineAt: run.deadlineAt });
  const secrets = new SecretValues();
  const children = new ChildPlays({
    env: o.env,
    run,
    journal: o.journal,
    plays: o.plays,
    policy: waitPolicyFor(o.env, run.testPolicy),
    waiters: o.waiters,
    waits,
    meter: invocation.meter,
    signal: invocation.signal,
    emit: o.emit,
    log: invocation.log,
    now: o.now,
    suspend: (resumeAt, reason) => {
      if (!invocation.suspension.signal.aborted) {
        invocation.log(`${reason}: this invocation yields; the map goes on when the child ends`);
        invocation.suspension.abort(new WaitSignal(resumeAt, reason));
      }
      return invocation.suspension.signal.reason as Error;
    },
  });
  return {
    children,
    waits,
    secrets,
    journal: o.journal,
    suspended: invocation.suspension.signal,
    egress: new PlayFetch({ env: o.env, org: run.org, signal: invocation.signal, secrets }),
  };
}

/**
 * Parks the run: `waiting` when it waits on the journal (a wait, a sleep, a
 * child), and the alarm at the earliest of its deadlines and the run's limit.
 * After a row's child made the invocation yield, the chunks it stopped go
 * back to pending under a new epoch: they were stopped, not lost, so the
 * next invocation does not count them as an interrupted one.
 */
async function park(o: DriveOptions, resumeAt: number, waiting: boolean, suspended = false): Promise<number> {
  if (suspended && o.store.runningChunks() > 0) {
    o.store.resetRunningChunks();
    o.store.bumpAttempt();
    await releaseRowLeases(o);
  }
  const due = o.journal.nextDue();
  const at = Math.min(resumeAt, due ?? resumeAt, o.store.run()!.deadlineAt);
  if (waiting) {
    o.store.setStatus("waiting");
    await o.onStatus();
  }
  return at;
}

async function drivePlay(
  o: DriveOptions,
  play: PlayDefinition,
  ctx: RunContext,
  log: (line: string) => void,
  services: PlayServices,
  suspended: AbortSignal,
  limited: AbortSignal,
): Promise<InvocationEnd> {
  const { store, now } = o;
  const parked = (resumeAt: number, waiting: boolean, suspend = false): InvocationEnd => {
    store.noteInfraFailure(true);
    return { kind: "parked", resumeAt, waiting, suspended: suspend };
  };
  const finished = (status: "completed" | "failed" | "cancelled", outcome: { result?: unknown; error?: RunError } = {}): InvocationEnd => ({
    kind: "finished",
    status,
    outcome,
  });
  try {
    const result = await play.run(ctx, store.input());
    await services.children.idle();
    // A play that caught a wait's signal has not really ended: it waits.
    if (services.waits.parked) return parked(services.waits.parked.resumeAt, true);
    store.noteInfraFailure(true);
    return finished("completed", { result: result ?? null });
  } catch (error) {
    // Child submits still in flight are answered (and recorded) before the invocation ends.
    await services.children.idle();
    const stops: Stops = {
      // cancel() records the request before it aborts the invocation: either says the run was cancelled.
      cancelled: o.signal.aborted || store.run()!.cancelRequested,
      deadline: limited.aborted,
      suspendedUntil: suspended.aborted ? (suspended.reason as YieldSignal).resumeAt : null,
      parkedUntil: services.waits.parked?.resumeAt ?? null,
    };
    const end = endAfterThrow(error, stops);
    switch (end.kind) {
      case "deadline":
        return finished("failed", { error: deadlineExceeded(store.run()!) });
      case "parked":
        return parked(end.resumeAt, end.waiting, end.suspended);
      case "cancelled":
        return finished("cancelled");
      case "infra": {
        const failures = store.noteInfraFailure(false);
        if (failures <= MAX_INFRA_RETRIES) {
          log(`retrying after an infrastructure error (${failures}/${MAX_INFRA_RETRIES}): ${end.error.message}`);
          return { kind: "retry", at: now() + Math.min(30_000, 250 * 2 ** failures) };
        }
        return finished("failed", { error: runErrorOf(end.error) });
      }
      case "failed":
        return finished("failed", { error: runErrorOf(end.error) });
    }
  }
}

/** A failure as the run's error: its code (play_failed when it has none), message and details. */
function runErrorOf(error: unknown): RunError {
  const details = detailsOf(error);
  return { code: codeOf(error) ?? "play_failed", message: messageOf(error), ...(details ? { details } : {}) };
}

/** The run's error at its runtime limit: a failure that says so, not a cancel. */
function deadlineExceeded(run: RunRecord): RunError {
  const limitS = Math.round((run.deadlineAt - run.createdAt) / 1000);
  return {
    code: "deadline_exceeded",
    message: `the run hit its runtime limit of ${limitS} s (timeoutSeconds) at ${new Date(run.deadlineAt).toISOString()} and was stopped; rows completed so far are kept, and a rerun resumes the rest`,
  };
}

/**
 * Ends the run: writes salvage back into receipts if it can, releases its
 * leases, records the outcome (salvage included), appends the terminal event.
 * Returns when the alarm should retry the salvage still pending, else null.
 */
async function finish(
  o: DriveOptions,
  status: "completed" | "failed" | "cancelled",
  outcome: { result?: unknown; error?: RunError },
): Promise<number | null> {
  const { store } = o;
  const restore = store.salvage.pendingCount() > 0 ? await restoreSalvage(store.salvage, receiptClient(o)) : null;
  if (status !== "completed") await releaseLeases(o);
  const raw = outcome.error ? { ...outcome.error, ...spentAtEnd(store, outcome.error), failureSamples: store.failureSamples() } : undefined;
  const redacted = raw && o.redact ? o.redact(raw) : raw;
  // Salvage is attached after redaction: it holds the exact billed outputs.
  const salvage = store.salvage.record();
  const error = redacted && salvage ? { ...redacted, message: `${redacted.message}; ${salvageSummary(salvage)}`, salvage } : redacted;
  if (restore?.failure)
    o.emit("log.appended", { line: `salvage could not be written back into receipts yet (${restore.failure}); retrying by alarm` });
  if (o.meter) {
    // Counted before the terminal status is visible, so a reader of the finished run sees all of it.
    store.addUsage(o.meter);
    o.meter.rpc = o.meter.provider = o.meter.retries = o.meter.rateLimited = o.meter.lookups = o.meter.outcomeUnknown = 0;
  }
  // Nothing runs once the run has ended: chunks still marked running show as not computed, not active;
  // requests reserved but never answered are not this run's spend (a run that completes them pays).
  store.resetRunningChunks();
  store.spend.releaseAll();
  await o.reportSpend?.();
  store.setStatus(status, { result: outcome.result, error });
  const progress = store.allProgress();
  if (status === "completed") o.emit("run.completed", { result: outcome.result ?? null, progress });
  // A failed run always ends with an error (every finish("failed") is given one).
  else if (status === "failed") o.emit("run.failed", { error: error!, progress });
  else o.emit("run.cancelled", { progress });
  await o.onStatus();
  return restore && restore.pending > 0 ? o.now() + restoreDelayMs(o, 0) : null;
}

/** A run stopped by its cap reports what it billed in the end (requests in flight at the refusal were billed after it). */
function spentAtEnd(store: RunStore, error: RunError): Partial<RunError> {
  if (error.code !== "spend_cap_reached" || !error.details) return {};
  return { details: { ...error.details, spent: toCredits(store.spend.billedMicros()) } };
}

function salvageSummary(salvage: NonNullable<ReturnType<RunStore["salvage"]["record"]>>): string {
  return `${salvage.total} billed provider outputs could not be stored in their receipts and are kept as salvage on this run (${salvage.restored} written back since, ${salvage.pending} pending)`;
}

function receiptClient(o: DriveOptions): ReceiptClient {
  const run = o.store.run()!;
  return new ReceiptClient({
    env: o.env,
    org: run.org,
    shardCount: o.policy.receiptShards,
    meter: o.meter ?? new SubrequestMeter(),
    faults: faultProbeFor(o.env),
  });
}

function restoreDelayMs(o: DriveOptions, tries: number): number {
  const ladder = o.policy.salvageRestoreRetryMs;
  return ladder[Math.min(tries, ladder.length - 1)]!;
}

/** A finished run with salvage still pending: try to write it into its receipts again (by alarm, with backoff). */
async function retrySalvageOfEndedRun(o: DriveOptions): Promise<number | null> {
  const { store } = o;
  if (store.salvage.pendingCount() === 0) return null;
  const tries = store.salvage.restoreTries();
  if (tries >= MAX_RESTORE_TRIES) {
    o.emit("log.appended", { line: `gave up writing salvage back into receipts after ${tries} tries; it stays in this run's error` });
    return null;
  }
  const { pending, failure } = await restoreSalvage(store.salvage, receiptClient(o));
  if (pending > 0) return o.now() + restoreDelayMs(o, tries + 1);
  const record = store.salvage.record()!;
  o.emit("salvage.restored", {
    total: record.total,
    restored: record.restored,
    superseded: record.superseded,
    ...(failure ? { lastFailure: failure } : {}),
  });
  return null;
}

/**
 * A run parked while its map waits on children frees its row leases, so it
 * holds none while it waits; the chunks claim their rows again when it goes
 * on. Receipts stay leased: a provider call may still be in flight.
 */
async function releaseRowLeases(o: DriveOptions): Promise<void> {
  const run = o.store.run()!;
  const meter = new SubrequestMeter();
  const releases = Object.keys(o.store.allProgress()).map((name) =>
    new SheetClient({
      env: o.env,
      meter,
      location: { org: run.org, play: run.play, dataset: name, shardCount: o.store.map(name)!.shardCount },
    }).releaseRun(run.runId),
  );
  const failed = (await Promise.allSettled(releases)).filter((r) => r.status === "rejected").length;
  if (failed) o.emit("log.appended", { line: `could not release row leases on ${failed} shards while waiting; they expire by themselves` });
}

/** Teardown: free the row and receipt leases the run holds so an immediate rerun is not blocked. */
async function releaseLeases(o: DriveOptions): Promise<void> {
  const run = o.store.run()!;
  const meter = new SubrequestMeter();
  const releases: Promise<number>[] = [
    new ReceiptClient({ env: o.env, org: run.org, shardCount: o.policy.receiptShards, meter }).releaseRun(run.runId),
  ];
  for (const name of Object.keys(o.store.allProgress())) {
    const map = o.store.map(name)!;
    releases.push(
      new SheetClient({
        env: o.env,
        meter,
        location: { org: run.org, play: run.play, dataset: name, shardCount: map.shardCount },
      }).releaseRun(run.runId),
    );
  }
  const results = await Promise.allSettled(releases);
  const failed = results.filter((r) => r.status === "rejected").length;
  if (failed) o.emit("log.appended", { line: `could not release leases on ${failed} shards; they expire by themselves` });
}
