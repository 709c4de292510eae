/**
 * A watched run's progress, folded from its live messages, and how it is
 * written: a bar per map for a terminal, a plain line for logs and pipes.
 * Pure: no I/O, no clock of its own.
 */
import { TERMINAL_STATUSES, type LiveMessage, type MapProgress, type RunView, type SnapshotMessage } from "../client/index.ts";
import { printable } from "./printable.ts";

/** One map as the CLI shows it. */
export interface MapLine {
  name: string;
  total: number;
  completed: number;
  failed: number;
  rowsPerSecond: number | null;
  etaSeconds: number | null;
}

/** What a live message changed, for renderers that print rather than redraw. */
export type Change = { kind: "status"; status: string } | { kind: "map"; map: MapLine } | { kind: "log"; line: string } | { kind: "none" };

/** The run's state, updated message by message. */
export class RunProgress {
  readonly runId: string;
  play = "";
  /** Empty until the first snapshot, so that the snapshot always reports the status. */
  status = "";
  /** Credits billed to the run so far (all its maps), where the server reports them. */
  spend: number | null = null;
  readonly maps = new Map<string, MapLine>();

  constructor(runId: string) {
    this.runId = runId;
  }

  /** The ledger position of the last snapshot: events up to it are history it already reflects. */
  #snapshotSeq = 0;
  /**
   * The waits started and not finished, by key, from every event seen (a watch replays the ledger from its start):
   * a run that finished one wait and parked again on another is still waiting (parking appends no event).
   */
  #openWaits = new Set<string>();

  /** Folds one live message in and says what changed. */
  apply(message: LiveMessage): Change[] {
    if (message.type === "snapshot") {
      const snapshot = message as SnapshotMessage;
      this.#snapshotSeq = snapshot.seq;
      return this.#snapshot(snapshot.run);
    }
    const event = message as Record<string, unknown> & { type: string };
    if (event.type === "wait.started" && typeof event.key === "string") this.#openWaits.add(event.key);
    if (event.type === "wait.finished" && typeof event.key === "string") this.#openWaits.delete(event.key);
    // A replayed event older than the snapshot would move the status and counts back: only its log line is news.
    if (typeof event.seq === "number" && event.seq <= this.#snapshotSeq && event.type !== "log.appended") return [];
    switch (event.type) {
      // A run being cancelled stays `cancelling` until it has ended, whatever its play still does.
      case "run.started":
        return this.#setLiveStatus("running");
      case "wait.started":
        return this.#setLiveStatus("waiting");
      case "wait.finished":
        return this.#setLiveStatus(this.#openWaits.size > 0 ? "waiting" : "running");
      case "run.completed":
        return this.#setStatus("completed");
      case "run.failed":
        return this.#setStatus("failed");
      case "run.cancelled":
        return this.#setStatus("cancelled");
      case "log.appended":
        return typeof event.line === "string" ? [{ kind: "log", line: printable(event.line) }] : [];
      case "map.progress": {
        if (typeof event.map !== "string") return [];
        const map = this.#mapLine(event.map, event as Partial<MapProgress>);
        map.rowsPerSecond = numberOr(event.rowsPerSecond, null);
        map.etaSeconds = numberOr(event.etaSeconds, null);
        // `spend` is the run's running total, not this map's.
        const spend = creditsOf(event.spend);
        if (spend !== null) this.spend = spend;
        return [{ kind: "map", map }];
      }
      default:
        return [];
    }
  }

  /**
   * The run as read once the watch is over: its status, spend and final
   * counts. Live counts include rows of chunks still running, which a
   * cancelled or failed run never finishes; a rate or an ETA no longer applies.
   */
  applyFinal(run: RunView): void {
    this.#snapshot(run);
    for (const map of this.maps.values()) {
      map.rowsPerSecond = null;
      map.etaSeconds = null;
    }
  }

  /** A snapshot is where the run stands now: its status, and every map as news. */
  #snapshot(run: RunView): Change[] {
    this.play = run.play;
    const spend = creditsOf(run.usage?.spend);
    if (spend !== null) this.spend = spend;
    const status = this.#setStatus(run.status);
    const maps = Object.entries(run.progress?.maps ?? {}).map(
      ([name, progress]): Change => ({ kind: "map", map: this.#mapLine(name, progress) }),
    );
    return [...status, ...maps];
  }

  /** The answer to `POST …/cancel`: `cancelling` (until the end's event), or how the run had already ended. */
  cancelAnswered(status: string): Change[] {
    return TERMINAL_STATUSES.has(this.status) ? [] : this.#setStatus(status);
  }

  #setLiveStatus(status: string): Change[] {
    return this.status === "cancelling" ? [] : this.#setStatus(status);
  }

  #setStatus(status: string): Change[] {
    if (status === this.status) return [];
    this.status = status;
    return [{ kind: "status", status }];
  }

  #mapLine(name: string, progress: Partial<MapProgress>): MapLine {
    let map = this.maps.get(name);
    if (!map) {
      map = { name, total: 0, completed: 0, failed: 0, rowsPerSecond: null, etaSeconds: null };
      this.maps.set(name, map);
    }
    map.total = numberOr(progress.total, map.total);
    map.completed = numberOr(progress.completed, map.completed);
    map.failed = numberOr(progress.failed, map.failed);
    return map;
  }
}

/** A spend figure as events and views carry it: a number of credits, or `{ total }`. */
function creditsOf(value: unknown): number | null {
  if (typeof value === "number" && Number.isFinite(value)) return value;
  if (value && typeof value === "object" && typeof (value as { total?: unknown }).total === "number")
    return (value as { total: number }).total;
  return null;
}

function numberOr<T>(value: unknown, fallback: T): number | T {
  return typeof value === "number" && Number.isFinite(value) ? value : fallback;
}

/** `1m 05s`, `42s`, `2h 03m`. */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

/** Credits with at most two decimals: `12.25`, `3`. */
export function formatCredits(credits: number): string {
  return String(Math.round(credits * 100) / 100);
}

/** The figures after a map's count: failed, rate and ETA while it runs, and the run's spend when given. */
function details(map: MapLine, done: boolean, spend: number | null): string[] {
  const parts = [`${map.failed} failed`];
  if (map.rowsPerSecond !== null && !done) parts.push(`${map.rowsPerSecond.toFixed(1)} rows/s`);
  if (map.etaSeconds !== null && !done) parts.push(`ETA ${formatDuration(map.etaSeconds)}`);
  if (spend !== null) parts.push(`spend ${formatCredits(spend)} credits`);
  return parts;
}

/** `leads: 240/300 done, 3 failed, 52.1 rows/s, ETA 1s, spend 12.25 credits` (plain output). */
export function plainMapLine(map: MapLine, spend: number | null = null): string {
  const done = map.total > 0 && map.completed + map.failed >= map.total;
  return `${map.name}: ${map.completed + map.failed}/${map.total} done, ${details(map, done, spend).join(", ")}`;
}

/**
 * `leads  [██████████░░░░]  240/300  3 failed  52.1 rows/s  ETA 1s  spend 12.25 credits`:
 * the bar is `width` cells, filled for completed rows and shaded for failed ones.
 */
export function barMapLine(map: MapLine, options: { nameWidth: number; width: number; spend?: number | null }): string {
  const doneRows = map.completed + map.failed;
  const done = map.total > 0 && doneRows >= map.total;
  const cells = (rows: number) => (map.total > 0 ? Math.round((Math.min(rows, map.total) / map.total) * options.width) : 0);
  const filled = cells(doneRows);
  const failed = Math.min(filled, cells(map.failed));
  const bar = "█".repeat(filled - failed) + "▓".repeat(failed) + "░".repeat(options.width - filled);
  const count = `${doneRows}/${map.total}`;
  return [map.name.padEnd(options.nameWidth), `[${bar}]`, count, ...details(map, done, options.spend ?? null)].join("  ");
}

/**
 * The lines a terminal shows for the run: a header, then a bar per map. The
 * spend is the run's: on the map's line when there is one map, else in the header.
 */
export function barFrame(progress: RunProgress, columns: number): string {
  const maps = [...progress.maps.values()];
  const spendInHeader = progress.spend !== null && maps.length !== 1;
  const header = `${progress.runId}  ${progress.play}  ${progress.status}${spendInHeader ? `  spend ${formatCredits(progress.spend!)} credits` : ""}`;
  if (!maps.length) return header;
  const nameWidth = Math.min(24, Math.max(...maps.map((m) => m.name.length)));
  // Leave room for the name and the figures; never fewer than 10 cells of bar.
  const width = Math.max(10, Math.min(30, columns - nameWidth - 70));
  const spend = spendInHeader ? null : progress.spend;
  return [header, ...maps.map((m) => barMapLine(m, { nameWidth, width, spend }))].join("\n");
}
