/**
 * What the map runner makes of a chunk attempt that did not simply end: one
 * that died (lost its leases, had a late write rejected), one that wound down
 * (its invocation's budget ran low), one whose rows stayed leased by another
 * run, one whose rows were leased by its own run's other chunks. Each is
 * logged (with its notice code) and stored; the error is the one that fails
 * the map when the chunk has been retried too often.
 */
import { TerminalError } from "../../core/errors";
import type { ChunkSummary } from "../../contracts/executors";
import type { RunStore } from "../../stores/run-store";
import type { InvocationScope } from "../invocation/scope";
import { describeKeys } from "./attempt-leases";
import type { AttemptOutcome } from "./chunk-executor";

/** Wind-downs of a chunk in a row without progress (stalledCount) before the map fails (the executor's limit too). */
export const MAX_STALLED_WIND_DOWNS = 3;

type Outcomes = { scope: Pick<InvocationScope, "log" | "policy" | "meter">; store: RunStore };

/**
 * The chunk's attempt no longer owns some of its rows or receipts: it stays
 * `running` for the next invocation to redispatch. The error when it has
 * been redispatched too often.
 */
export function attemptDied(
  { scope, store }: Outcomes,
  at: { map: string; idx: number; attemptSeq: number },
  summary: ChunkSummary,
): TerminalError | null {
  const { map, idx, attemptSeq } = at;
  const keys = { rows: [...new Set([...summary.rejected, ...(summary.lost?.rows ?? [])])], receipts: summary.lost?.receipts ?? [] };
  const late = summary.rejected.length ? `; its late write of ${summary.rejected.length} rows was rejected and overwrote nothing` : "";
  // Why it lost them, when it said (an executor that stopped or went silent): what a reader of the log asks first.
  const why = summary.lost?.reason ? ` (${summary.lost.reason})` : "";
  scope.log(
    `chunk ${map}#${idx}: attempt ${attemptSeq} no longer owns ${describeKeys(keys) || "its rows"}${why}${late}; the chunk is redispatched under a new attempt`,
    summary.rejected.length ? "late_write_rejected" : "attempt_redispatched",
  );
  const count = store.noteRedispatch(map, idx);
  if (count <= scope.policy.maxChunkRedispatches) return null;
  return new TerminalError(
    "chunk_redispatch_exhausted",
    `map "${map}" chunk ${idx}: its attempts lost their leases ${count} times (last: ${describeKeys(keys) || "its rows"}${why}); another run may keep taking its rows, or the shards are overloaded; let other runs of this play finish, then rerun (completed rows are reused)`,
  );
}

/**
 * Wound-down invocations in a row that made no progress, counting the one that just ended: it left all `deferred`
 * of the rows it went on from (`resume`, null for an attempt's first invocation) and learned no call's outcome (no
 * answer stored, no lookup saying a request never arrived: AttemptLeases.callsSettled). A row that cannot settle
 * within an invocation's budget would otherwise go on for ever; one whose calls are answered has not stalled (the
 * next invocation reuses the answers), though several may pass before its first row settles.
 */
export function stalledCount(
  resume: { rows: readonly number[]; stalled?: number } | null,
  deferred: number,
  settledCalls: boolean,
): number {
  return resume && deferred === resume.rows.length && !settledCalls ? (resume.stalled ?? 0) + 1 : 0;
}

/**
 * The chunk's attempt wound down here: the chunk goes back to pending with
 * its counts and the rows it left (the next invocation runs only those).
 * The error when it wound down {@link MAX_STALLED_WIND_DOWNS} times in a row
 * without progress (here or, as its executor counted them, there): no attempt
 * does better (the same rows need the same budget), so it is not redispatched.
 */
export function attemptWoundDown(
  { scope, store }: Outcomes,
  at: { map: string; idx: number; attemptSeq: number; resume: { rows: number[]; stalled?: number } | null },
  summary: AttemptOutcome & { deferred: number[] },
): TerminalError | null {
  const { map, idx, attemptSeq, resume } = at;
  const { deferred, unstarted, stalled: counted, callsSettled = 0, ...done } = summary;
  // An executor counts its own; an attempt handed back before it started says nothing of its rows.
  const stalled = counted ?? (unstarted ? (resume?.stalled ?? 0) : stalledCount(resume, deferred.length, callsSettled > 0));
  store.deferChunk(map, idx, { rows: deferred, done, stalled });
  scope.log(
    `chunk ${map}#${idx}: attempt ${attemptSeq} wound down (${scope.meter.total} subrequests in this invocation); ${deferred.length} of its rows go on in the next`,
    "attempt_wound_down",
  );
  if (stalled < MAX_STALLED_WIND_DOWNS) return null;
  return new TerminalError(
    "chunk_stalled",
    `map "${map}" chunk ${idx}: ${stalled} invocations in a row wound down without settling a row; its rows need more than an invocation's subrequests or time`,
  );
}

/** A chunk whose rows other runs kept leased through every retry (`blocked`: the rows they leased). */
export function blockedTooLong(map: string, idx: number, retries: number, blocked: ChunkSummary["blocked"]): TerminalError {
  const owners = [...new Set(blocked.map((b) => b.ownerRunId))];
  const keys = `${blocked
    .slice(0, 5)
    .map((b) => b.key)
    .join(", ")}${blocked.length > 5 ? ", …" : ""}`;
  const by = owners.length === 1 ? `run ${owners[0]}` : `runs ${owners.slice(0, 3).join(", ")}${owners.length > 3 ? ", …" : ""}`;
  return new TerminalError(
    "rows_blocked",
    `map "${map}" chunk ${idx}: ${blocked.length} rows stayed leased by ${by} through ${retries} retries (rows ${keys}); ` +
      `let that run finish or cancel it (POST /v1/runs/<id>/cancel), then rerun this one: rows already completed are reused`,
  );
}

/**
 * Every row the chunk's attempt found blocked was leased by another attempt
 * of its own run and epoch: the key repeats in the input (an upload is not
 * deduplicated), in another chunk of the same pass or earlier in this one.
 * Those attempts have ended by the time the map looks at what is left, so
 * the blocked rows go back to pending, to run again at once, with no blocked
 * retry counted; the rows the attempt settled stay counted, as a wound-down
 * attempt's do (ChunkResume). (A newer epoch of the run fences the claim
 * instead, and an older one's lease is taken over: a row leased by the run
 * itself is leased by its current epoch.) Blocked rows named by key only (an
 * older executor's summary) send the whole chunk back.
 */
export function ownRowsBlocked(
  { scope, store }: Outcomes,
  at: { map: string; idx: number; attemptSeq: number; rows: number },
  summary: ChunkSummary,
): void {
  const { map, idx, attemptSeq, rows } = at;
  const { blocked } = summary;
  const indexes = blocked.map((b) => b.index);
  if (indexes.every((index) => index !== undefined)) {
    store.deferChunk(map, idx, { rows: indexes as number[], done: { ...summary, blocked: [], rejected: [], lost: null } });
  } else {
    const from = idx * store.map(map)!.chunkRows;
    store.deferChunk(map, idx, { rows: Array.from({ length: rows }, (_, i) => from + i), done: NOTHING_DONE });
  }
  const keys = describeKeys({ rows: blocked.map((b) => b.key), receipts: [] });
  scope.log(
    `chunk ${map}#${idx}: attempt ${attemptSeq} found ${keys} leased by other attempts of this run (a key repeated in the input); they run again when this pass ends (those attempts have stored them then), no blocked retry counted`,
  );
}

/** What an attempt stores of nothing: a chunk sent back whole counts its rows again when it runs. */
const NOTHING_DONE: ChunkSummary = { completed: 0, failed: 0, reused: 0, blocked: [], rejected: [], lost: null, failureSamples: [] };
