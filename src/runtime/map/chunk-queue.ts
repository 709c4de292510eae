/**
 * The chunks a map's drain has left to run in this invocation, in order:
 * one at a time, each for an attempt; or, once a chunk's attempt reused
 * every row (a rerun, most likely), consecutive ones together for a sweep
 * (chunk-executor.ts, sweepReused). Chunks a sweep gives back (some row was
 * not reused) go out first, one at a time, and so does the rest of the map.
 */
import type { ChunkRecord } from "../../stores/run-store";

/** At most this many rows in one sweep: a shard's claim takes at most 1,000 (ClaimRowsRequest). */
export const SWEEP_ROWS = 1_000;

export class ChunkQueue {
  #chunks: readonly ChunkRecord[];
  #next = 0;
  #returned: ChunkRecord[] = [];
  #sweepable: boolean;
  #sweeping = false;

  /** `sweepable`: the map may sweep (not under `force` or `forceToolRefresh`, which reuse almost nothing). */
  constructor(chunks: readonly ChunkRecord[], options: { sweepable: boolean }) {
    this.#chunks = chunks;
    this.#sweepable = options.sweepable;
  }

  /** Chunks this invocation set out to run. */
  get size(): number {
    return this.#chunks.length;
  }

  /** Chunks still to take (as attempts or in sweeps). */
  get left(): number {
    return this.#returned.length + this.#chunks.length - this.#next;
  }

  hasWork(): boolean {
    return this.#returned.length > 0 || this.#next < this.#chunks.length;
  }

  /** The next chunks: one for an attempt, or (sweeping) consecutive ones of up to SWEEP_ROWS rows. Call only while hasWork(). */
  take(): ChunkRecord[] {
    const back = this.#returned.shift();
    if (back) return [back];
    const group = [this.#chunks[this.#next++]!];
    let rows = group[0]!.rows;
    // A chunk a wound-down attempt left part of runs as an attempt (a sweep would count what it computed as reused).
    for (let next = this.#chunks[this.#next]; this.#sweeping && next && !group[0]!.resume; next = this.#chunks[this.#next]) {
      if (next.idx !== group.at(-1)!.idx + 1 || rows + next.rows > SWEEP_ROWS || next.resume) break;
      group.push(next);
      rows += next.rows;
      this.#next++;
    }
    return group;
  }

  /** An attempt reused every row of its chunk: the chunks after it go out in sweeps. */
  reusedOnly(): void {
    this.#sweeping = this.#sweepable;
  }

  /** A sweep left these (some row was not reused, or it failed): they run as attempts, and the map goes one chunk at a time again. */
  giveBack(chunks: readonly ChunkRecord[]): void {
    if (chunks.length === 0) return;
    this.#returned.push(...chunks);
    this.#sweeping = false;
  }
}
