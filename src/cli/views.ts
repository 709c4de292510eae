/**
 * How a watched run is shown: plain lines in a pipe or a log, nothing until
 * the end with `--json`, and (in ./TerminalView.ts, loaded only for a
 * terminal) bars redrawn in place.
 */
import type { Writable } from "node:stream";
import { TERMINAL_STATUSES, type RunView } from "../client/index.ts";
import { plainMapLine, type Change, type RunProgress } from "./progress.ts";
import { printable } from "./printable.ts";

/** A view of a watched run. */
export interface RunWatchView {
  /** The run changed (`changes` says how). */
  update(progress: RunProgress, changes: Change[]): void;
  /** Stops drawing, so that a question can be asked on the terminal. */
  pause(): void;
  resume(progress: RunProgress): void;
  /** A line that stays (a notice from the CLI itself). */
  note(line: string): void;
  /** The run ended, or the CLI stops watching it (`run` is null then). */
  finish(progress: RunProgress, run: RunView | null): void;
}

/** A line per change: status changes, log lines, and each map's progress at most once a second (and when it is done). */
export class PlainView implements RunWatchView {
  #out: Writable;
  #lastLineAt = new Map<string, number>();
  #now: () => number;

  constructor(out: Writable, now: () => number = Date.now) {
    this.#out = out;
    this.#now = now;
  }

  update(progress: RunProgress, changes: Change[]): void {
    for (const change of changes) {
      if (change.kind === "status") {
        // The run's end is the summary line of `finish`.
        if (!TERMINAL_STATUSES.has(change.status)) this.#line(progress, change.status);
      } else if (change.kind === "log") {
        this.#line(progress, `log: ${change.line}`);
      } else if (change.kind === "map") {
        const map = change.map;
        const done = map.total > 0 && map.completed + map.failed >= map.total;
        const last = this.#lastLineAt.get(map.name);
        if (!done && last !== undefined && this.#now() - last < 1000) continue;
        if (done && last === Infinity) continue;
        this.#lastLineAt.set(map.name, done ? Infinity : this.#now());
        this.#line(progress, plainMapLine(map, progress.spend));
      }
    }
  }

  pause(): void {}
  resume(): void {}

  note(line: string): void {
    this.#out.write(`${printable(line)}\n`);
  }

  /** Each map's final line, unless its done line was printed already, then the summary. */
  finish(progress: RunProgress, run: RunView | null): void {
    if (!run) return;
    const spend = run.usage?.spend?.total ?? progress.spend;
    for (const [name, counts] of Object.entries(run.progress?.maps ?? {})) {
      if (this.#lastLineAt.get(name) === Infinity) continue;
      this.#line(
        progress,
        plainMapLine(
          { name, total: counts.total, completed: counts.completed, failed: counts.failed, rowsPerSecond: null, etaSeconds: null },
          spend,
        ),
      );
    }
    this.#out.write(`${summaryOf(run)}\n`);
  }

  #line(progress: RunProgress, text: string): void {
    this.#out.write(`${progress.runId} ${text}\n`);
  }
}

/** Nothing while the run goes on; `--json` prints the final object itself. */
export class SilentView implements RunWatchView {
  update(): void {}
  pause(): void {}
  resume(): void {}
  note(): void {}
  finish(): void {}
}

/** The last line of a watched run: how it ended, with its result or error. */
export function summaryOf(run: RunView): string {
  const maps = Object.entries(run.progress?.maps ?? {}).map(([name, m]) => `${name} ${m.completed} completed, ${m.failed} failed`);
  const spend = run.usage?.spend ? `; spend ${Math.round(run.usage.spend.total * 100) / 100} credits` : "";
  const counts = maps.length ? ` (${maps.join("; ")}${spend})` : spend ? ` (${spend.slice(2)})` : "";
  if (run.status === "completed") return `${run.runId} completed${counts}: ${JSON.stringify(run.result)}`;
  if (run.status === "failed")
    return `${run.runId} failed${counts}: ${run.error ? printable(`${run.error.code}: ${run.error.message}`) : "no error recorded"}`;
  return `${run.runId} ${run.status}${counts}`;
}
