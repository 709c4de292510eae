/**
 * One chunk attempt inside an executor (src/actors/MapExecutor.ts): take the
 * map's field functions from the play (capture.ts), then run the attempt
 * exactly as the coordinator would in its own invocation (the same chunk
 * executor: claims, leases and their heartbeat, receipts, pacing, fenced
 * persist), with this object's own outbound connections, subrequests and
 * CPU. Bills and salvage go to the executor's outbox as they happen; the
 * reporter carries them, the rows' progress and the end to the coordinator.
 */
import type { CaptureSource, CoordinatorLink } from "../../clients/executors";
import type { FaultProbe } from "../../clients/faults";
import { SheetClient } from "../../clients/shards";
import { codeOf, detailsOf, messageOf, TroupeError } from "../../core/errors";
import type { SubrequestMeter } from "../../core/meter";
import { timeoutSignal } from "../../core/time";
import type { AttemptEnd, AttemptResume, ChunkAssignment, ChunkSweepAssignment } from "../../contracts/executors";
import type { PlannedRow } from "../../contracts/shards";
import type { AnyTool, FieldSet, MapOptions, PlayDefinition, RowContext } from "../../play/types";
import type { ExecutorStore, HeldAssignment } from "../../stores/executor-store";
import { readWindow } from "../map/dataset-view";
import { attemptServices } from "../map/attempt-leases";
import { InProcessChunkExecutor, joinedSummary, refusedIn, sweepReused } from "../map/chunk-executor";
import { MAX_STALLED_WIND_DOWNS, stalledCount } from "../map/chunk-outcomes";
import { UploadRows } from "../map/upload-rows";
import type { OpenUpload } from "../../uploads/uploads";
import { rowSchemaOf } from "../../play/define";
import { PlayFetch, SecretValues } from "../invocation/play-fetch";
import { safeStringify } from "../invocation/play-context";
import type { InvocationScope } from "../invocation/scope";
import { createDispatchServices, createMapGuards } from "../tools/services";
import type { PacerRegistry } from "../pacing/pacers";
import { ToolScheduler } from "../tools/tool-scheduler";
import type { AttemptReporter } from "./attempt-reporter";
import { CaptureUnsupported, captureMap } from "./capture";
import { sourceTooLarge } from "./capture-sources";
import { ExecutorSpend } from "./executor-spend";
import { redactorFor } from "../views/redact";

/** How long the play may take to reach the map when replayed here. */
const CAPTURE_TIMEOUT_MS = 30_000;

/** What the executor gives each attempt it runs. */
export interface AttemptHost {
  env: Env;
  store: ExecutorStore;
  plays: ReadonlyMap<string, PlayDefinition>;
  tools: ReadonlyMap<string, AnyTool>;
  link: CoordinatorLink;
  /** The invocation's meter (the platform's subrequest cap is per invocation). */
  meter: SubrequestMeter;
  faults: FaultProbe;
  reporter: AttemptReporter;
  /** The executor invocation's pacers, shared by the attempts it runs side by side (they share its connections). */
  pacers: PacerRegistry;
  /** Uploads this executor has opened (their indexes), kept across its attempts. */
  uploads: Map<string, Promise<OpenUpload>>;
  /**
   * What the coordinator's invocation of epoch `attemptSeq` had done by the time it ran `map` (asked once per epoch and
   * map: the trace of a later map has the earlier maps' outcomes), or null when it is gone.
   */
  source(attemptSeq: number, map: string): Promise<CaptureSource | null>;
  now(): number;
}

/** A row of this map starts a child play: only the coordinator keeps a run's children, so the map runs there. */
class ChildNeedsCoordinator extends TroupeError {
  constructor(play: string) {
    super("child_needs_coordinator", `a row starts a child play (${play}); this map runs in the coordinator`);
  }
}

/** The attempt wound down: it goes on in the executor's next invocation, as `resume` says. */
export interface WoundDown {
  kind: "resume";
  resume: AttemptResume;
}

/**
 * Runs `assignment` (or, with `resume`, the rows a wind-down left of it)
 * until it ends, `stop` aborts it or `windDown` winds it down, and says how
 * it ended; never throws.
 */
export async function runAttempt(
  host: AttemptHost,
  { assignment, resume: held }: { assignment: ChunkAssignment; resume: AttemptResume | null },
  stop: AbortSignal,
  windDown: AbortSignal,
): Promise<AttemptEnd | WoundDown> {
  // Held after this executor wound it down; else what the coordinator's own attempt, wound down, left of the chunk.
  const resume = held ?? (assignment.resume ? { ...assignment.resume, grantedMicros: 0 } : null);
  let source: CaptureSource | null;
  try {
    source = await host.source(assignment.attempt.attemptSeq, assignment.map);
  } catch (error) {
    // Too large to come here, it would be every attempt's fate: the map runs in the coordinator, which holds it.
    if (sourceTooLarge(error))
      return { kind: "inline", reason: `its play's source is too large to send to an executor (${messageOf(error)})` };
    source = null;
  }
  if (!source) return { kind: "stopped", reason: "the coordinator's invocation that assigned it has ended" };
  const { run, policy } = source;
  // Rows count in the run's progress within about a second (two progress intervals); a quiet attempt still says it lives.
  host.reporter.start(2 * policy.progressIntervalMs, Math.min(5_000, policy.rowLeaseTtlMs / 3));
  const play = host.plays.get(run.play);
  if (!play) return { kind: "failed", message: `play ${run.play} is not in this Worker` };
  const sheets = new SheetClient({ env: host.env, location: assignment.dataset, meter: host.meter, faults: host.faults });

  let captured: Captured;
  try {
    captured = await capture(host, source, play, assignment);
  } catch (error) {
    if (error instanceof CaptureUnsupported) return { kind: "inline", reason: error.message };
    return { kind: "failed", message: `could not take the fields of "${assignment.map}": ${messageOf(error)}` };
  }

  // Cleared when the attempt ends: a pending timer would keep every signal derived from it (one a request) until the run's deadline.
  const deadline = timeoutSignal(run.deadlineAt - host.now());
  const signal = AbortSignal.any([stop, deadline.signal]);
  const log = (line: string, code?: Parameters<AttemptReporter["log"]>[1]) => host.reporter.log(line, code);
  const scope: InvocationScope = {
    env: host.env,
    run,
    policy,
    meter: host.meter,
    signal,
    faults: host.faults,
    // Nothing on an attempt's path appends ledger events: its log lines and rows are reported.
    emit: () => {},
    log,
    now: host.now,
  };
  const guards = createMapGuards({ policy, deadlineAt: run.deadlineAt, now: host.now });
  const spend = new ExecutorSpend({
    attemptId: assignment.attempt.attemptId,
    capped: source.spendCapped,
    grantedMicros: resume?.grantedMicros ?? 0,
    // A reservation waiting for a grant stops with the attempt, and when its invocation winds down.
    signal: AbortSignal.any([signal, windDown]),
    grant: (wantedMicros) => host.link.grantSpend(assignment.attempt.attemptId, wantedMicros),
    keep: (bill) => host.store.addBill(bill),
  });
  const dispatch = createDispatchServices(scope, {
    tools: host.tools,
    // Durable in this object before the call's error propagates; reported with the next report.
    salvage: (entry) => host.store.addSalvage(entry),
    spend,
    observeRequest: (provider) => host.reporter.sent(provider),
    pacers: host.pacers,
  });
  const secrets = new SecretValues();
  // A wound-down attempt's rows fetch nothing more either: a row cut off goes on in the next invocation.
  const egress = new PlayFetch({ env: host.env, org: run.org, signal: AbortSignal.any([signal, windDown]), secrets, meter: host.meter });
  const fields = rowFields(
    captured.fields,
    (rc) => ({
      rowKey: rc.rowKey,
      signal: rc.signal,
      tool: rc.tool,
      log: (...args: unknown[]) => rc.log(...args.map((a) => secrets.redact(typeof a === "string" ? a : safeStringify(a)))),
      fetch: (url, init) =>
        egress.fetch(url, init).catch((error: unknown) => {
          if (rc.signal.aborted) refusedIn(rc);
          throw error;
        }),
      runPlay: (child) => {
        const error = new ChildNeedsCoordinator(String(child));
        guards.latch.trip(error);
        return Promise.reject(error);
      },
    }),
    captured.asRow,
  );

  const uploadRows = new UploadRows({
    bucket: host.env.UPLOADS,
    org: run.org,
    key: captured.options.key,
    schema: rowSchemaOf(play.input),
    faults: host.faults,
    opened: host.uploads,
  });
  const executor = new InProcessChunkExecutor({
    sheets,
    receipts: dispatch.receipts,
    fields,
    policy,
    latch: guards.latch,
    signal,
    windDown,
    recompute: run.force || run.forceToolRefresh,
    log,
    redact: (text) => redactorFor(host.env).redact(secrets.redact(text)),
    now: host.now,
    scheduler: (attempt, workers, leases) =>
      new ToolScheduler({
        services: attemptServices(dispatch, leases),
        guards,
        attempt,
        refresh: run.forceToolRefresh,
        retryUnknown: run.retryUnknown,
        workers,
      }),
    readSlice: (slice) => uploadRows.read(slice),
    onRow: (_chunk, event) => host.reporter.row(event),
    onDraining: () => host.reporter.draining(),
  });
  try {
    const {
      deferred,
      callsSettled = 0,
      ...part
    } = await executor.execute(
      { map: assignment.map, chunk: assignment.chunk, attempt: assignment.attempt, rows: assignment.rows, slice: assignment.slice },
      resume ? new Set(resume.rows) : undefined,
    );
    const summary = resume ? joinedSummary(resume.done, part) : part;
    if (deferred.length === 0 || summary.lost || summary.rejected.length > 0) return { kind: "summary", summary };
    // Under load its reports and renewals take more of each invocation's budget: calls answered count as progress.
    const stalled = stalledCount(resume, deferred.length, callsSettled > 0);
    // Its rows go back to the coordinator, which fails the map (chunk_stalled) as it would a stall of its own: a
    // redispatched attempt would stall the same way.
    if (stalled >= MAX_STALLED_WIND_DOWNS) return { kind: "summary", summary, deferred, stalled };
    // Handed back, the coordinator says what becomes of its rows.
    if (codeOf(windDown.reason) !== HANDED_BACK)
      log(
        `attempt ${assignment.attempt.attemptId} wound down (${host.meter.total} subrequests in this invocation): ${deferred.length} of its rows go on in a fresh one`,
        "attempt_wound_down",
      );
    return { kind: "resume", resume: { rows: deferred, done: summary, grantedMicros: spend.unusedMicros, stalled } };
  } catch (error) {
    const tripped = guards.latch.tripped;
    if (tripped instanceof ChildNeedsCoordinator) return { kind: "inline", reason: tripped.message };
    if (stop.aborted) return { kind: "stopped", reason: messageOf(stop.reason) };
    if (deadline.signal.aborted) return { kind: "stopped", reason: "the run reached its runtime limit" };
    if (tripped)
      return {
        kind: "fatal",
        code: codeOf(tripped) ?? "receipt_store_failed",
        message: tripped.message,
        details: detailsOf(tripped),
        prevented: guards.latch.prevented,
      };
    return { kind: "failed", message: messageOf(error) };
  } finally {
    deadline.clear();
  }
}

type Captured = Awaited<ReturnType<typeof captureMap>>;

/** The map's field functions and options, from the play replayed up to its `ctx.map` call (capture.ts). */
function capture(
  host: Pick<AttemptHost, "env" | "meter">,
  source: CaptureSource,
  play: PlayDefinition,
  at: { map: string; dataset: ChunkAssignment["dataset"] },
): Promise<Captured> {
  return withTimeout(
    captureMap(play, source, at.map, (map, offset, limit) =>
      readWindow(
        new SheetClient({ env: host.env, location: { ...at.dataset, dataset: map.name, shardCount: map.shardCount }, meter: host.meter }),
        source.run.runId,
        offset,
        limit,
      ),
    ),
    CAPTURE_TIMEOUT_MS,
    `the play did not reach ctx.map("${at.map}") within ${CAPTURE_TIMEOUT_MS / 1000} s when replayed`,
  );
}

/**
 * A rerun's sweep of several chunks (chunk-executor.ts, sweepReused): their
 * rows read once (from the upload: its index opened once per executor, each
 * row checked against the play's schema and keyed as an attempt would; a key
 * function is taken from the play, replayed as for an attempt), the reused
 * ones recorded. Answers the chunks whose every row was reused; throws when
 * it cannot tell (the coordinator then dispatches them one by one).
 */
export async function runSweep(
  host: Pick<AttemptHost, "env" | "plays" | "meter" | "faults" | "uploads" | "source">,
  sweep: ChunkSweepAssignment,
): Promise<number[]> {
  const { dataset } = sweep;
  let rows: readonly PlannedRow[] = sweep.rows;
  if (sweep.slice) {
    const play = host.plays.get(dataset.play);
    if (!play) throw new TroupeError("play_not_found", `play ${dataset.play} is not in this Worker`);
    let key: MapOptions["key"] = sweep.key ?? undefined;
    if (sweep.keyInPlay) {
      const source = await host.source(sweep.attempt.attemptSeq, sweep.map);
      if (!source) throw new TroupeError("stopped", "the coordinator's invocation that assigned it has ended");
      key = (await capture(host, source, play, sweep)).options.key;
    }
    const uploadRows = new UploadRows({
      bucket: host.env.UPLOADS,
      org: dataset.org,
      key,
      schema: rowSchemaOf(play.input),
      faults: host.faults,
      opened: host.uploads,
    });
    rows = await uploadRows.read(sweep.slice);
  }
  const sheets = new SheetClient({ env: host.env, location: dataset, meter: host.meter, faults: host.faults });
  return sweepReused(sheets, sweep, rows, sweep.recompute);
}

/** The captured fields, each run as its row with the executor's row context. */
function rowFields(fields: FieldSet, contextOf: (rc: RowContext) => RowContext, asRow: <T>(row: RowContext, fn: () => T) => T): FieldSet {
  const bound: FieldSet = {};
  for (const [name, fn] of Object.entries(fields)) {
    bound[name] = (row, rc) => {
      const context = contextOf(rc);
      return asRow(context, () => fn(row, context));
    };
  }
  return bound;
}

async function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TroupeError("capture_timeout", message)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * What an attempt held and not running hands back when its coordinator winds
 * it down: every row it has left, with what it did before (a wind-down here,
 * or the coordinator's own attempt's).
 */
export function handedBack({ assignment, resume }: Pick<HeldAssignment, "assignment" | "resume">): AttemptEnd {
  // Wound down here before: it ran, and what it left goes back. Else it never started.
  if (resume) return { kind: "summary", summary: resume.done, deferred: resume.rows, stalled: resume.stalled };
  if (assignment.resume) return { kind: "summary", summary: assignment.resume.done, deferred: assignment.resume.rows, unstarted: true };
  const { rows, slice } = assignment;
  const deferred = slice ? Array.from({ length: slice.to - slice.from }, (_, i) => slice.from + i) : rows.map((row) => row.index);
  const summary = { completed: 0, failed: 0, reused: 0, blocked: [], rejected: [], lost: null, failureSamples: [] };
  return { kind: "summary", summary, deferred, unstarted: true };
}

/** The code of the wind-down its coordinator asks for: the attempt hands its rows back rather than go on. */
export const HANDED_BACK = "handed_back";

/** What an attempt held and not running ends with when it is stopped: it never starts, or goes on after its wind-down. */
export function stoppedUnstarted({ resume }: Pick<HeldAssignment, "resume">, reason: string): AttemptEnd {
  return { kind: "stopped", reason: `stopped before it ${resume ? "went on after a wind-down" : "started"}: ${reason}` };
}
