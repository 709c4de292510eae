/**
 * What a run's watchers hear of its maps: `map.progress` (the counts, the
 * rate, the spend) at most once per `progressIntervalMs` per map and only
 * when something changed, and `chunks.completed`, the chunks a map completed
 * since, which go out with it. A rerun sweeps a thousand chunks in a few
 * seconds, and a first run at low latency completes tens a second: an event
 * each was hundreds a second to every watcher (and ten thousand ledger rows
 * for a million-row rerun). Which chunks are still to tell is kept with the
 * chunks (`told`), so a completion whose invocation died before its event
 * went out is told by the next.
 */
import type { ChunkCompletion } from "../../api/responses";
import type { RunStore } from "../../stores/run-store";
import { MICROS } from "../../stores/spend-store";
import type { InvocationScope } from "../invocation/scope";
import type { LiveRows } from "./live-rows";

/** The most chunks one event carries (about 80 KB): more go in the next. */
export const MAX_CHUNKS_PER_EVENT = 1_000;

export class MapProgressFeed {
  #scope: Pick<InvocationScope, "now" | "emit" | "policy">;
  #store: RunStore;
  #live: LiveRows;
  /** When this invocation began: rows per second are its own. */
  readonly startedAt: number;
  #lastAt = new Map<string, number>();
  #lastCounts = new Map<string, string>();
  #computed = new Map<string, number>();

  constructor(options: { scope: Pick<InvocationScope, "now" | "emit" | "policy">; store: RunStore; live: LiveRows }) {
    this.#scope = options.scope;
    this.#store = options.store;
    this.#live = options.live;
    this.startedAt = options.scope.now();
  }

  /** Rows of `map` computed in this invocation by a chunk (done or not: counted in its rate all the same). */
  computed(map: string, rows: number): void {
    this.#computed.set(map, (this.#computed.get(map) ?? 0) + rows);
  }

  /** Tells the watchers where `map` stands, unless it told them less than an interval ago (`force`: now, as at its end). */
  tell(map: string, force: boolean): void {
    const now = this.#scope.now();
    if (!force && now - (this.#lastAt.get(map) ?? 0) < this.#scope.policy.progressIntervalMs) return;
    this.#lastAt.set(map, now);
    this.flushChunks(map);
    const progress = this.#live.apply(map, this.#store.progress(map), this.#store.runningCounts(map));
    // The run's spend so far, in credits: what a watcher sees grow with each billed call.
    const spend = this.#store.spend.billedMicros() / MICROS;
    // A watcher gains nothing from the same counts twice.
    const counts = JSON.stringify({ ...progress, spend });
    if (this.#lastCounts.get(map) === counts) return;
    this.#lastCounts.set(map, counts);
    const elapsedS = Math.max(0.001, (now - this.startedAt) / 1000);
    const rowsPerSecond = Math.round(((this.#computed.get(map) ?? 0) / elapsedS) * 10) / 10;
    const remaining = progress.total - progress.completed - progress.failed;
    const etaSeconds = rowsPerSecond > 0 ? Math.ceil(remaining / rowsPerSecond) : null;
    this.#scope.emit("map.progress", { map, ...progress, rowsPerSecond, etaSeconds, spend });
  }

  /**
   * Emits the chunks `map` completed since its last event (its chunks stored done and not yet told), at most
   * {@link MAX_CHUNKS_PER_EVENT} an event. Each event and its chunks' mark are written in one synchronous step.
   */
  flushChunks(map: string): void {
    for (;;) {
      const chunks: ChunkCompletion[] = this.#store.untoldChunks(map, MAX_CHUNKS_PER_EVENT);
      if (!chunks.length) return;
      this.#scope.emit("chunks.completed", { map, chunks });
      this.#store.markChunksTold(map, chunks[chunks.length - 1]!.chunk);
      if (chunks.length < MAX_CHUNKS_PER_EVENT) return;
    }
  }
}
