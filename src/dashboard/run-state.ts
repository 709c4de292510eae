/**
 * The run as its page shows it, folded from reads of it (`GET /v1/runs/<id>`
 * or the live snapshot) and from its live events. Pure: no DOM, no I/O.
 *
 * While the run is live, `map.progress` counts include the rows of chunks
 * still running; once it has ended, the server's counts are final (rows of
 * chunks that never finished are not done), and they are what the page shows.
 *
 * Relative imports name their .ts file: the node-side tests import this module.
 */
import { TERMINAL_STATUSES, type LedgerEvent, type MapProgress, type RunStatus, type RunView } from "../client/index.ts";

/** One map's counts, from `GET /v1/runs/<id>` and the rates its `map.progress` events add. */
export type LiveMapProgress = Partial<MapProgress> & { rowsPerSecond?: number | null; etaSeconds?: number | null };

/** A run as the page shows it: `GET /v1/runs/<id>` (or a snapshot), with live events applied. */
export type RunInfo = Omit<RunView, "progress"> & {
  progress: { maps: Record<string, LiveMapProgress> };
  /** The newest live snapshot's `seq`: its counts already reflect every event up to it. */
  snapshotSeq?: number;
};

/** The events that end a run. */
export type RunEnd = Extract<LedgerEvent, { type: "run.completed" | "run.failed" | "run.cancelled" }>;

/** The fields of a `map.progress` event that are the map's progress. */
const PROGRESS_FIELDS = [
  "total",
  "completed",
  "failed",
  "active",
  "waiting",
  "blocked",
  "inFlight",
  "executors",
  "rowsPerSecond",
  "etaSeconds",
] as const;

/** Whether the run has ended: its counts are final then. */
function hasEnded(run: Pick<RunView, "status">): boolean {
  return TERMINAL_STATUSES.has(run.status);
}

/**
 * The run as `read` shows it, given what the page `shown` before. While the
 * run is live, events may be newer than a read already on its way: the larger
 * counts win. A read of the ended run is final; a read sent before the run
 * ended changes nothing once it has.
 */
export function mergeRead(shown: RunInfo | null, read: RunInfo): RunInfo {
  const snapshotSeq = Math.max(shown?.snapshotSeq ?? 0, read.snapshotSeq ?? 0);
  if (hasEnded(read)) return { ...read, progress: { maps: read.progress?.maps ?? {} }, snapshotSeq };
  if (shown && hasEnded(shown)) return shown;
  const maps: Record<string, LiveMapProgress> = { ...(read.progress?.maps ?? {}) };
  for (const [name, live] of Object.entries(shown?.progress?.maps ?? {})) {
    const counted = maps[name];
    if (!counted) continue;
    if ((live.completed ?? 0) + (live.failed ?? 0) > (counted.completed ?? 0) + (counted.failed ?? 0)) maps[name] = { ...counted, ...live };
    else maps[name] = { rowsPerSecond: live.rowsPerSecond, etaSeconds: live.etaSeconds, ...counted };
  }
  return { ...read, status: liveStatus(shown?.status, read.status), progress: { maps }, snapshotSeq };
}

/**
 * The status to show of a live run, given one shown and one read: a read sent before the run started (or before a
 * cancel was taken) is older than what the page shows, and never moves it back to `queued` (or from `cancelling`).
 */
function liveStatus(shown: RunStatus | undefined, read: RunStatus): RunStatus {
  if (shown === undefined || shown === read) return read;
  if (read === "queued" || shown === "cancelling") return shown;
  return read;
}

/**
 * The run as a live snapshot at ledger position `seq` shows it (merged like
 * {@link mergeRead}). The feed then replays the events up to `seq` that the
 * page has not seen (all of them on a page that has just opened, those missed
 * on a reconnect): they are older than the snapshot, and move no count.
 */
export function mergeSnapshot(shown: RunInfo | null, run: RunInfo, seq: number): RunInfo {
  return mergeRead(shown, { ...run, snapshotSeq: seq });
}

/**
 * The run after one of its `map.progress` events. An ended run's counts are
 * final, and a snapshot's are newer than the events it reflects: a replayed
 * event changes neither.
 */
export function applyMapProgress(run: RunInfo, event: Extract<LedgerEvent, { type: "map.progress" }>): RunInfo {
  if (hasEnded(run) || event.seq <= (run.snapshotSeq ?? 0)) return run;
  const update: LiveMapProgress = { ...run.progress?.maps?.[event.map] };
  for (const field of PROGRESS_FIELDS) if (event[field] !== undefined) (update as Record<string, unknown>)[field] = event[field];
  return { ...run, progress: { maps: { ...(run.progress?.maps ?? {}), [event.map]: update } } };
}

/** The run after its terminal event: its status, result or error, and the counts it ended with. */
export function applyEnd(run: RunInfo, event: RunEnd): RunInfo {
  const ended: RunInfo = { ...run, status: event.type.slice("run.".length) as RunStatus };
  if (event.type === "run.completed") ended.result = event.result;
  if (event.type === "run.failed") ended.error = event.error;
  // The run's final counts; without them (an older ledger), the live ones stay until the run is read again.
  if (event.progress && typeof event.progress === "object") ended.progress = { maps: event.progress };
  return ended;
}

/**
 * The signal form's key after the run's waits changed: the key of the wait now open (`awaited`), unless the field
 * holds a key the user typed (one that is neither empty nor what the form was last filled with, `prefilled`).
 */
export function signalKeyToShow(field: string, prefilled: string | null, awaited: string | null): string {
  if (awaited === null) return field;
  return field === "" || field === prefilled ? awaited : field;
}
