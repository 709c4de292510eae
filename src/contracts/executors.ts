/**
 * What a run's coordinator and its executors say to each other
 * (src/actors/MapExecutor.ts, src/runtime/executor/): the coordinator assigns
 * a chunk attempt; the executor asks once per invocation of the run for what
 * it needs to rebuild the map's field functions, may ask for spend, and
 * reports in bulk: rows as they settle, bills, salvage, log lines, usage, and
 * at the end the attempt's summary.
 */
import type { NoticeCode } from "../api/responses";
import type { AttemptRef, PlannedRow, SalvageEntry, UploadSlice } from "./shards";

/** Where a dataset's rows live (mirrors the sheet client's location). */
export interface AssignedDataset {
  org: string;
  play: string;
  dataset: string;
  shardCount: number;
}

/** One chunk attempt for an executor to run. */
export interface ChunkAssignment {
  runId: string;
  map: string;
  chunk: number;
  attempt: AttemptRef;
  /** The chunk's rows; empty when they are in the run's upload (`slice`), which the executor reads them from. */
  rows: PlannedRow[];
  slice: UploadSlice | null;
  dataset: AssignedDataset;
  /**
   * The attempt this one runs alongside: the executor's current attempt,
   * which said it drains (AttemptReport.draining). Every other attempt the
   * executor holds is replaced by this one; null replaces them all.
   */
  alongside: string | null;
  /**
   * The map has no provider latency to size its executors by yet: the
   * attempt reports its first latency without waiting for a row to settle,
   * and until its first answer, twice a second, how long its oldest
   * unanswered request has waited, once that is a second or more
   * (AttemptReport.waiting). Absent in
   * assignments stored before it existed.
   */
  sizing?: boolean;
  /**
   * What an earlier attempt of the chunk, wound down in the coordinator, left of it: this one runs only those rows, and
   * its summary is the whole chunk's (absent: the whole chunk).
   */
  resume?: ChunkResume | null;
  /**
   * The coordinator's invocation that assigned it (a new one per alarm, within
   * an epoch): its capture source is that invocation's (CaptureSource.invocation),
   * never one an earlier invocation of the epoch answered. Absent in
   * assignments stored before it existed.
   */
  invocation?: string;
}

/** A play-level fetch's response as a trace keeps it for executors' replays (its body, at most MAX_TRACED_FETCH_BYTES in all). */
export interface TracedResponse {
  status: number;
  statusText: string;
  headers: [string, string][];
  body: Uint8Array;
}

/** A chunk's attempt wound down: the indexes of the rows it left, and what it had done (its summary so far). */
export interface ChunkResume {
  /** Indexes of the chunk's rows still to run (their leases are the wound-down attempt's). */
  rows: number[];
  /** The summary so far (its `lost` is null: an attempt that lost leases ends). */
  done: ChunkSummary;
  /** Wind-downs in a row without progress: no row settled, no call's outcome learned (absent: none). */
  stalled?: number;
}

/**
 * An attempt its executor wound down (its invocation's budget ran low:
 * MapExecutor) and goes on with in a fresh invocation, under the same
 * attempt: the rows it left, what it did before, and what it was granted
 * to spend and did not use.
 */
export interface AttemptResume extends ChunkResume {
  /** Of the spend the coordinator granted the attempt, what it has not used (0 when the run has no cap). */
  grantedMicros: number;
}

/**
 * An attempt's end its executor could not report (the coordinator did not
 * answer): held until the alarm's retry sends it again (ExecutorStore.unreported),
 * so that the retry does not take the attempt for one cut off by a restart.
 */
export interface UnreportedEnd {
  /**
   * The report sent last and not answered, without its bills and salvage (they stay in the outbox, and are read
   * again up to `outboxUpTo`): it may have been applied, so it is sent again as it was (AttemptReport.seq).
   */
  unanswered: { report: AttemptReport; outboxUpTo: number | null } | null;
  /** The end, unless the unanswered report carries it. */
  end: AttemptEnd | null;
  /** Log lines not yet in a report. */
  logs: AttemptReport["logs"];
}

/**
 * Consecutive chunks of a map that a rerun probably finds done (a chunk
 * before them had every row reused): the executor reads their rows once and
 * records, in one claim per shard, only the rows that are reused. Nothing is
 * leased or computed; a chunk with any other row is dispatched as usual.
 */
export interface ChunkSweepAssignment {
  runId: string;
  map: string;
  /** The coordinator's epoch (no attempt of its own: it leases nothing). */
  attempt: AttemptRef;
  /** The chunks, in order, and how many rows each holds: `rows` (or the slice's rows) are theirs one after another. */
  chunks: { chunk: number; rows: number }[];
  rows: PlannedRow[];
  slice: UploadSlice | null;
  /** The map's `key` option when the rows come from the slice and it is a field name... */
  key: string | null;
  /** ...or true when it is a function: the executor replays the play to the map's call to take it. */
  keyInPlay: boolean;
  /** The coordinator's invocation that asked (ChunkAssignment.invocation). */
  invocation?: string;
  recompute: boolean;
  dataset: AssignedDataset;
}

/** Which chunks of a sweep had every row reused (now recorded in the run's view), and the executor's usage doing it. */
export interface ChunkSweepResult {
  reused: number[];
  usage: UsageDelta;
}

/** One play-level effect the coordinator's invocation made, as the executor replays it (see capture.ts). */
export interface TracedEffect {
  kind: string;
  name: string;
  ordinal: number;
  /**
   * What a tool call, child or fetch was called with (`callIdentity`): calls of one
   * tool made at once are numbered as their inputs become known, which may
   * differ between the coordinator and a replay; a replay matches them by it.
   */
  input?: string | null;
  /** null while the effect had not settled when the source was taken. */
  outcome: { ok: true; value: unknown } | TracedFailure | null;
}

/**
 * How a traced effect failed, with what the play may test of the error: a
 * tool's `ToolCallError` (`retryable`, `status`, `retryAfterMs`) or a
 * `TerminalError`; a replay throws the same kind.
 */
export interface TracedFailure {
  ok: false;
  code: string | null;
  message: string;
  as?: "tool" | "terminal";
  retryable?: boolean;
  status?: number | null;
  retryAfterMs?: number | null;
}

/** A map the play finished before: what its handle says, and where its rows are. */
export interface TracedMap {
  name: string;
  total: number;
  completed: number;
  failed: number;
  duplicatesDropped: number;
  shardCount: number;
}

/** A bill the executor recorded: one billable request the provider billed. */
export interface BilledRequest {
  requestKey: string;
  toolId: string;
  provider: string;
  credits: number;
  /**
   * The attempt whose spend grant the request was reserved under: its grant
   * shrinks by the bill. Absent for a request billed under no grant (the run
   * has no cap, or the bill was found already made). An executor's outbox is
   * shared by the attempts it runs side by side, and any of their reports may
   * carry it: the reporting attempt is not the one that spent.
   */
  grantOf?: string;
}

/** Counters an executor's invocation adds to the run's usage. */
export interface UsageDelta {
  rpc: number;
  provider: number;
  retries: number;
  rateLimited: number;
  lookups: number;
  outcomeUnknown: number;
  /** `rpc` by kind (`sheet.claimRows`, ...), as the meter counts it. */
  rpcByKind: Record<string, number>;
}

/** What an attempt did, as the map runner records it (runtime/map/chunk-executor.ts). */
export interface ChunkSummary {
  /** Rows now completed: computed by this attempt, or reused from an earlier one. */
  completed: number;
  failed: number;
  /** Of `completed`, rows reused without work. */
  reused: number;
  /** Rows leased by another live attempt: not executed here (`index`: the row's input index, absent from older executors). */
  blocked: { key: string; leaseExpiresAt: number; ownerRunId: string; index?: number }[];
  /** Rows this attempt computed but no longer owned when it wrote them (nothing was written for them). */
  rejected: string[];
  /**
   * The heartbeat found rows or receipts of this attempt held by another
   * attempt (or expired): the attempt stopped early. A chunk with `lost` or
   * `rejected` keys must be redispatched under a new epoch.
   */
  lost: { rows: string[]; receipts: string[]; reason: string } | null;
  /** A few failed rows, for the run's failure samples. */
  failureSamples: { key: string; error: string }[];
}

/** How an executor's attempt ended. */
export type AttemptEnd =
  /**
   * `deferred`: the indexes of rows it left when its coordinator had it wind down (nothing of them was persisted);
   * `unstarted`: it had not started (its rows go back as they were given: no sign of a row that cannot settle);
   * `stalled`: its wind-downs in a row without progress, as the executor counted them (ChunkResume.stalled), when it
   * ran: calls whose answers it stored count as progress, which its summary does not show.
   */
  | { kind: "summary"; summary: ChunkSummary; deferred?: number[]; unstarted?: boolean; stalled?: number }
  /** It stopped without a summary: cancelled, superseded, or its executor restarted mid-way. */
  | { kind: "stopped"; reason: string }
  /** A failure that stops the map (the latch, the spend cap): `details` as the error carried them; `prevented` calls it stopped. */
  | { kind: "fatal"; code: string; message: string; details?: Record<string, unknown>; prevented: number }
  /** The store or network failed under it: the chunk is redispatched. */
  | { kind: "failed"; message: string }
  /** A row of this map needs what only the coordinator has (a child play): the map runs in the coordinator. */
  | { kind: "inline"; reason: string };

/** A report from an executor: deltas since its last report, and at the end how the attempt ended. */
export interface AttemptReport {
  executor: string;
  attemptId: string;
  /**
   * The coordinator's invocation that assigned the attempt (ChunkAssignment.invocation): a later one that assigned
   * the same attempt again (one wound down and handed back) does not take this attempt's reports for its own.
   */
  invocation?: string;
  /**
   * The run's attempt epoch it runs under (its AttemptRef's): once the run has a newer one, no invocation assigns
   * this attempt again, so its end frees its grant whichever invocation hears it (absent: from before this was sent).
   */
  attemptSeq?: number;
  /**
   * Who sends it (one reporter: one attempt in one executor invocation, or one executor's end of a held attempt) and
   * its place among that reporter's reports, from 1. A report whose answer was lost is sent again as it was, before
   * anything newer: the coordinator applies each (reporter, seq) once (absent: applied as it comes).
   */
  reporter?: string;
  seq?: number;
  map: string;
  chunk: number;
  /** Rows that started, and that settled, since the last report. */
  rows: { started: number; completed: number; failed: number; stopped: number };
  logs: { line: string; code?: NoticeCode }[];
  bills: BilledRequest[];
  salvage: SalvageEntry[];
  usage: UsageDelta;
  /** Provider latency observed since the last report, per provider: calls answered and their total time. */
  latency: { provider: string; calls: number; totalMs: number }[];
  /**
   * Sizing (ChunkAssignment.sizing) before any answer: per provider, how
   * long the oldest request still unanswered has waited. The latency is at
   * least that: at 2 s the map widens during its first two seconds instead
   * of after them.
   */
  waiting: { provider: string; oldestMs: number }[];
  /**
   * Its last few rows are all it has left: its executor's connections would
   * soon idle, and the coordinator may give the executor its next attempt
   * to run alongside (ChunkAssignment.alongside). Stays true once said.
   */
  draining: boolean;
  end: AttemptEnd | null;
}

/**
 * The coordinator's answer to a report: `stop` when no invocation waits for
 * the attempt any more (it ended, was given up on, or the coordinator
 * restarted and redispatches its chunk under a new epoch; a cancel found no
 * invocation to stop it): the executor stops it at once instead of calling
 * providers until its next lease heartbeat finds it fenced.
 */
export interface ReportAnswer {
  stop: string | null;
}

/** An executor asks for spend before it bills past what it was granted. */
export interface SpendGrant {
  /** Micro-credits granted now (0: the cap allows nothing more). */
  grantedMicros: number;
  /** When refused: what the run has billed and the cap, for the error. */
  spentCredits: number;
  cap: { credits: number; reason: "maxSpend" | "daily" | "parent"; limit?: number } | null;
  /**
   * Nothing granted now, but other attempts of the run hold reservations that will be billed or given back: ask
   * again after this long rather than take the cap as reached.
   */
  waitMs?: number;
}
