/**
 * Rows of running chunk attempts, as they go: started, then settled
 * (completed or failed) when their last field returns, before their chunk
 * persists them. Kept in the coordinator's memory, per map and chunk, so a
 * run's progress counts a row within moments of its last tool call instead of
 * when its whole chunk ends. A chunk's rows leave the overlay when the chunk
 * attempt ends (its counts are then the stored ones); an invocation that dies
 * takes the overlay with it, and the redispatched chunk counts again.
 */
import type { MapProgress } from "../../api/responses";
import { getOrInsert } from "../../core/collections";
import type { ChunkCounts } from "../../stores/run-store";

interface ChunkRows {
  inFlight: number;
  completed: number;
  failed: number;
}

export class LiveRows {
  #maps = new Map<string, Map<number, ChunkRows>>();
  /** Executors of each map busy now. */
  #remote = new Map<string, number>();

  /** An executor of `map` became busy (+1) or idle (-1). */
  remote(map: string, delta: 1 | -1): void {
    const count = (this.#remote.get(map) ?? 0) + delta;
    if (count > 0) this.#remote.set(map, count);
    else this.#remote.delete(map);
  }

  started(map: string, chunk: number): void {
    this.#chunk(map, chunk).inFlight++;
  }

  settled(map: string, chunk: number, status: "completed" | "failed" | "stopped"): void {
    const rows = this.#chunk(map, chunk);
    rows.inFlight = Math.max(0, rows.inFlight - 1);
    if (status !== "stopped") rows[status]++;
  }

  /** The chunk attempt ended (persisted, lost or stopped): its rows count from storage from now on. */
  ended(map: string, chunk: number): void {
    const chunks = this.#maps.get(map);
    chunks?.delete(chunk);
    if (chunks?.size === 0) this.#maps.delete(map);
  }

  /**
   * `progress` (the stored counts of chunks not running) with the rows
   * settled in running chunks counted as done, `inFlight` (rows being
   * computed now) and `executors` (objects computing this map's chunks now:
   * its executors, or this coordinator, or none). A running chunk an earlier
   * attempt stored counts for (`stored`) shows those until its attempt's own
   * count reaches them: a chunk computed again neither drops to nothing as
   * it starts nor counts its rows twice. A chunk going on after a wind-down
   * shows both: its stored rows are not the ones its attempt computes now.
   */
  apply(map: string, progress: MapProgress, stored: readonly ChunkCounts[] = []): MapProgress {
    const chunks = this.#maps.get(map);
    let inFlight = 0;
    let completed = 0;
    let failed = 0;
    const earlier = new Map(stored.map((counts) => [counts.chunk, counts]));
    for (const [chunk, rows] of chunks ?? []) {
      inFlight += rows.inFlight;
      const before = earlier.get(chunk);
      earlier.delete(chunk);
      // A wound-down attempt's rows (stored) and its continuation's (live) are different rows: both count.
      const shown = before?.resumed
        ? { completed: before.completed + rows.completed, failed: before.failed + rows.failed }
        : before && before.completed + before.failed > rows.completed + rows.failed
          ? before
          : rows;
      completed += shown.completed;
      failed += shown.failed;
    }
    for (const before of earlier.values()) {
      completed += before.completed;
      failed += before.failed;
    }
    const settled = Math.min(completed + failed, progress.active);
    return {
      ...progress,
      completed: progress.completed + completed,
      failed: progress.failed + failed,
      active: progress.active - settled,
      inFlight,
      executors: this.#remote.get(map) ?? (progress.active > 0 ? 1 : 0),
    };
  }

  applyAll(maps: Record<string, MapProgress>, stored: (map: string) => readonly ChunkCounts[]): Record<string, MapProgress> {
    return Object.fromEntries(Object.entries(maps).map(([name, progress]) => [name, this.apply(name, progress, stored(name))]));
  }

  #chunk(map: string, chunk: number): ChunkRows {
    const chunks = getOrInsert(this.#maps, map, () => new Map<number, ChunkRows>());
    return getOrInsert(chunks, chunk, () => ({ inFlight: 0, completed: 0, failed: 0 }));
  }
}
