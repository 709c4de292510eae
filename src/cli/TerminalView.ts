/** A watched run in a terminal: a bar per map, redrawn in place (log-update). */
import type { Writable } from "node:stream";
import { createLogUpdate } from "log-update";
import type { RunView } from "../client/index.ts";
import { barFrame, type Change, type RunProgress } from "./progress.ts";
import { printable } from "./printable.ts";
import { summaryOf, type RunWatchView } from "./views.ts";

/** Redraws at most this often: the feed may bring dozens of events a second. */
const REDRAW_INTERVAL_MS = 100;

/** A bar per map, redrawn in place; log lines and notes scroll above the bars. */
export class TerminalView implements RunWatchView {
  #out: Writable & { columns?: number };
  #log: ReturnType<typeof createLogUpdate>;
  #paused = false;
  /** Log lines that arrived while paused (the Ctrl-C question was open): printed on resume. */
  #heldLines: string[] = [];
  #lastDrawAt = 0;
  #pending: ReturnType<typeof setTimeout> | null = null;
  #progress: RunProgress | null = null;

  constructor(out: Writable & { columns?: number }) {
    this.#out = out;
    this.#log = createLogUpdate(out);
  }

  update(progress: RunProgress, changes: Change[]): void {
    this.#progress = progress;
    for (const change of changes) {
      if (change.kind !== "log") continue;
      if (this.#paused) this.#heldLines.push(`log: ${change.line}`);
      else this.#log.persist(`log: ${change.line}`);
    }
    this.#schedule();
  }

  pause(): void {
    this.#paused = true;
    this.#cancelPending();
    this.#log.clear();
  }

  resume(progress: RunProgress): void {
    this.#paused = false;
    this.#progress = progress;
    this.#printHeld();
    this.#draw();
  }

  note(line: string): void {
    // Notes quote server text (a refused cancel's message).
    const text = printable(line);
    if (this.#paused) this.#out.write(`${text}\n`);
    else this.#log.persist(text);
  }

  finish(progress: RunProgress, run: RunView | null): void {
    this.#cancelPending();
    this.#progress = progress;
    this.#paused = false;
    this.#printHeld();
    this.#draw();
    this.#log.done();
    if (run) this.#out.write(`${summaryOf(run)}\n`);
  }

  #schedule(): void {
    if (this.#paused || this.#pending) return;
    const wait = this.#lastDrawAt + REDRAW_INTERVAL_MS - Date.now();
    if (wait <= 0) {
      this.#draw();
      return;
    }
    this.#pending = setTimeout(() => {
      this.#pending = null;
      this.#draw();
    }, wait);
  }

  #printHeld(): void {
    for (const line of this.#heldLines.splice(0)) this.#log.persist(line);
  }

  #cancelPending(): void {
    if (this.#pending) clearTimeout(this.#pending);
    this.#pending = null;
  }

  #draw(): void {
    if (this.#paused || !this.#progress) return;
    this.#lastDrawAt = Date.now();
    this.#log(barFrame(this.#progress, this.#out.columns ?? 80));
  }
}
