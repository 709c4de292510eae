/**
 * The shapes of the server's answers (docs/api.md), as types, and the
 * statuses and events that end a run. No dependencies: the client loads this
 * at run time. The server builds these answers and the client trusts them;
 * `src/http/contract-conformance.ts` checks that the server's own types
 * still fit them.
 */

/** A run's status. `cancelling` is shown while a cancel was asked for and the run has not ended yet. */
export type RunStatus = "queued" | "running" | "waiting" | "completed" | "failed" | "cancelled" | "cancelling";

/** The statuses a run never leaves. */
export const TERMINAL_STATUSES: ReadonlySet<string> = new Set(["completed", "failed", "cancelled"]);

/** The ledger events that end a run; the live socket closes after sending one. */
export const TERMINAL_EVENTS: ReadonlySet<string> = new Set(["run.completed", "run.failed", "run.cancelled"]);

/** One map's progress in `GET /v1/runs/<id>` and in `map.progress` events. */
export interface MapProgress {
  total: number;
  completed: number;
  failed: number;
  active: number;
  waiting: number;
  blocked: number;
  /** Rows being computed now, and the objects computing this map's chunks. */
  inFlight?: number;
  executors?: number;
  blockedBy?: { runId: string; until: string };
}

/** Credits billed to a run: in total, and by provider and tool. */
export interface Spend {
  total: number;
  byProvider: Record<string, number>;
  byTool: Record<string, number>;
}

/** A run's error: a code, a message, and whatever the failure attached (samples, salvage, spend). */
export interface RunError {
  code: string;
  message: string;
  details?: unknown;
  failureSamples?: Array<{ map: string; key: string; error: string }>;
  salvage?: unknown;
}

/** `GET /v1/runs/<runId>`. */
export interface RunView {
  runId: string;
  play: string;
  org: string;
  status: RunStatus;
  runAttempt: number;
  parentRunId: string | null;
  progress: { maps: Record<string, MapProgress> };
  /** The play's JSON result once completed, else null. */
  result: unknown;
  error: RunError | null;
  usage: { spend?: Spend; [counter: string]: unknown };
  /** The run's spend cap in credits, or null. */
  maxSpend?: number | null;
  links?: RunLinks;
  createdAt: string;
  updatedAt: string;
}

/** One run in `GET /v1/runs`. */
export interface RunSummary {
  runId: string;
  play: string;
  status: RunStatus;
  parentRunId: string | null;
  createdAt: string;
  updatedAt: string;
}

/** `GET /v1/runs?limit=&cursor=`: newest first; `nextCursor` null on the last page. */
export interface RunList {
  runs: RunSummary[];
  nextCursor: string | null;
}

/** `GET /v1/plays`: each play's name and description, and whatever else the server describes. */
export interface PlayList {
  plays: Array<{ name: string; description: string } & Record<string, unknown>>;
}

/** Where a run's state, live feed, events and datasets are (paths under the server's origin). */
export interface RunLinks {
  self: string;
  live: string;
  events: string;
  /** Each dataset's rows, by name: the play's declared datasets, then the maps the run wrote. */
  datasets?: Record<string, string>;
}

/** `202` of `POST /v1/runs`. */
export interface RunStarted {
  runId: string;
  status: string;
  links: RunLinks;
  /**
   * A keyed retry sent the same file in another upload: the run an earlier upload of it started is answered, and
   * this upload is read by no run (delete it).
   */
  unusedUpload?: string;
}

/** `202` of `POST /v1/runs/<runId>/rerun`. */
export interface RerunStarted extends RunStarted {
  rerunOf: string;
}

/** `202` of `POST /v1/runs/<runId>/cancel`. */
export interface RunCancelled {
  runId: string;
  status: string;
}

/** `202` of a signal: `consumed` when a wait took it now (else it is kept for the next wait on the key). */
export interface SignalDelivered {
  runId?: string;
  eventKey?: string;
  consumed: boolean;
  duplicate: boolean;
  status: string;
}

/** A run's view of a dataset, one page (`GET /v1/runs/<id>/datasets/<name>`). */
export interface DatasetPage {
  rows: Array<Record<string, unknown>>;
  total: number;
  offset?: number;
  limit?: number;
  /** Present where the server pages by cursor; null on the last page. */
  nextCursor?: string | null;
}

/** One chunk's end: its rows completed and failed (reused ones included), and the attempt (epoch) that ran it. */
export interface ChunkCompletion {
  chunk: number;
  completed: number;
  failed: number;
  reused: number;
  attemptSeq: number;
}

/** Each map's counts, as a run's terminal event carries them. */
export type RunProgress = Record<string, MapProgress>;

/**
 * The fields of each ledger event, by type: the 13 events a run's ledger,
 * its live socket and `GET /v1/runs/<id>/events` carry (docs/api.md). The
 * server's emitter is typed by this map, so an event it appends and an event
 * a client reads cannot drift apart.
 */
export interface LedgerEventFields {
  "run.started": { play: string; runAttempt: number; parentRunId: string | null; depth: number };
  "run.completed": { result: unknown; progress: RunProgress };
  "run.failed": { error: RunError; progress: RunProgress };
  "run.cancelled": { progress: RunProgress };
  /** At most one per `progressIntervalMs` per map, and only when a count changed; `spend` is the run's total in credits. */
  "map.progress": MapProgress & { map: string; rowsPerSecond: number; etaSeconds: number | null; spend: number };
  /** The chunks of `map` that completed since its last event (at most one per `progressIntervalMs` per map, with its progress). */
  "chunks.completed": { map: string; chunks: ChunkCompletion[] };
  /** `code` names what the runtime did, for the lines that report it (see {@link NoticeCode}); a play's own lines have none. */
  "log.appended": { line: string; code?: NoticeCode };
  "child.started": { childRunId: string; play: string; reused: boolean };
  /**
   * `status` is the child's terminal status, or `timeout` when the parent stopped waiting for it
   * (`childRunId` is null when the child's submit had not been answered by then).
   */
  "child.finished": { childRunId: string | null; play: string | null; status: string; error?: RunError };
  "wait.started": { kind: "event" | "sleep" | "child"; key: string; eventKey?: string; dueAt: string | null };
  "wait.finished": { kind: "event" | "sleep" | "child"; key: string; eventKey?: string; outcome: "signal" | "timeout" | "elapsed" };
  "signal.received": { eventKey: string; consumedBy: string | null };
  "salvage.restored": { total: number; restored: number; superseded: number; lastFailure?: string };
}

/**
 * What a runtime log line reports, as a stable code (the line's wording may change):
 * - `invocation_resumed`: an invocation died with chunks in flight; they are redispatched under a new attempt.
 * - `invocation_suspended`: a row's child runs long; the invocation yields and the map goes on when the child ends.
 * - `leases_lost`: a chunk attempt, or the play's own tool calls, lost row or receipt leases (taken, expired, or not
 *   confirmed in time) and stopped: it sends nothing more.
 * - `attempt_redispatched`: a chunk attempt no longer owns some of its rows or receipts; the chunk runs again.
 * - `late_write_rejected`: the same, found when the shards refused the attempt's late write (it overwrote nothing).
 * - `receipt_taken_over`: a call's receipt was left running by an attempt that cannot finish it; this one takes it over.
 * - `call_recovered`: a taken-over call's result was read back from the provider instead of calling again.
 * - `map_repaired`: finalize found rows not persisted and runs their chunks again.
 * - `auth_rescoped`: a provider said a call's credentials changed; the call is claimed again under the new auth scope.
 * - `attempt_wound_down`: an executor's invocation neared the platform's subrequest or time limit; its attempt sent no
 *   request more, stored the rows it computed and goes on with the rest in a fresh invocation (nothing runs twice).
 */
export type NoticeCode =
  | "invocation_resumed"
  | "invocation_suspended"
  | "leases_lost"
  | "attempt_redispatched"
  | "late_write_rejected"
  | "receipt_taken_over"
  | "call_recovered"
  | "map_repaired"
  | "auth_rescoped"
  | "attempt_wound_down";

/** The type of a ledger event. */
export type LedgerEventType = keyof LedgerEventFields;

/** One entry of a run's event ledger, in `seq` order from 1: narrow it by `type`. */
export type LedgerEvent = {
  [Type in LedgerEventType]: { seq: number; type: Type; at: string } & LedgerEventFields[Type];
}[LedgerEventType];

/** `GET /v1/runs/<id>/events`. */
export interface EventPage {
  events: LedgerEvent[];
  nextCursor: number;
}

/** The first message on every live connection: the run now, and the ledger position it reflects. */
export interface SnapshotMessage {
  type: "snapshot";
  run: RunView;
  seq: number;
}

/** What a live connection sends: a snapshot, then ledger events. */
export type LiveMessage = SnapshotMessage | LedgerEvent;

/** `POST /v1/runs/estimate`: what the run would bill now (no run started, no provider called). */
export interface Estimate {
  rows: { total: number; reusable: number; toCompute: number };
  /** Per tool: requests answered from receipts (no bill) and new, billed requests known now. */
  calls: Record<string, { reused: number; new: number }>;
  /** Credits; `high` is null where nothing bounds the part not known yet. */
  spend: { low: number; expected: number; high: number | null };
  /** True when every request's input was known: then `low == expected == high` is what the run bills. */
  exact?: boolean;
  /** Why the estimate is a range, in words. */
  notes?: string[];
}

/** `201` of `POST /v1/uploads` (and of a multipart upload's `complete`). */
export interface Upload {
  uploadId: string;
  /** Data rows (a CSV's header line is not one). */
  rows: number;
  bytes: number;
  /** A CSV's header; for NDJSON, every field name in the file in the order first seen. */
  columns: string[];
  format: "csv" | "ndjson";
}

/** An upload checked, indexed and ready for a run: the `201` of `POST /v1/uploads` and of `complete`, and `GET /v1/uploads/<uploadId>`. */
export interface ReadyUpload extends Upload {
  status: "ready";
  /** The file's SHA-256, hex (uploads made before it was kept have none). */
  sha256?: string;
  createdAt: string;
}

/** An upload still receiving its bytes: a multipart upload before `complete`, or a file whose one request has not ended. */
export interface ReceivingUpload {
  uploadId: string;
  status: "receiving";
  format: Upload["format"];
  createdAt: string;
}

/** `GET /v1/uploads/<uploadId>`. */
export type UploadView = ReadyUpload | ReceivingUpload;

/**
 * `GET /v1/uploads?limit=&cursor=`: the org's uploads, each as `GET /v1/uploads/<uploadId>` describes it, in
 * upload-id order (newest first; uploads made before ids held their time sort anywhere); `nextCursor` null on the
 * last page.
 */
export interface UploadList {
  uploads: UploadView[];
  nextCursor: string | null;
}

/** `201` of `POST /v1/uploads?multipart=1`: send the parts to this upload, then complete it. */
export interface MultipartUploadStarted {
  uploadId: string;
}

/** `200` of `PUT /v1/uploads/<uploadId>/parts/<n>`. */
export interface UploadPartReceived {
  part: number;
  bytes: number;
}

/** Every error response's body. */
export interface ErrorBody {
  error: { code: string; message: string; details?: unknown };
}
