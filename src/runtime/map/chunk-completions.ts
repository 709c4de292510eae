/**
 * A map's chunk completions, coalesced into `chunks.completed` events. A
 * rerun sweeps a thousand chunks in a few seconds, and a first run at low
 * latency completes tens a second: an event each was hundreds a second to
 * every watcher (and ten thousand ledger rows for a million-row rerun). They
 * go out together when the map's progress does (at most one per
 * `progressIntervalMs`, src/runtime/map/map-runner.ts), and when its drain
 * ends, however it ends.
 */
import type { ChunkCompletion } from "../../api/responses";
import type { Emit } from "../../contracts/events";

/** The most chunks one event carries (about 80 KB): more wait for the next. */
export const MAX_CHUNKS_PER_EVENT = 1_000;

export class ChunkCompletions {
  #emit: Emit;
  #pending = new Map<string, ChunkCompletion[]>();

  constructor(emit: Emit) {
    this.#emit = emit;
  }

  add(map: string, completion: ChunkCompletion): void {
    const pending = this.#pending.get(map);
    if (pending) pending.push(completion);
    else this.#pending.set(map, [completion]);
  }

  /** Emits what `map` completed since the last flush, in events of at most {@link MAX_CHUNKS_PER_EVENT} chunks. */
  flush(map: string): void {
    const pending = this.#pending.get(map);
    if (!pending) return;
    this.#pending.delete(map);
    for (let at = 0; at < pending.length; at += MAX_CHUNKS_PER_EVENT)
      this.#emit("chunks.completed", { map, chunks: pending.slice(at, at + MAX_CHUNKS_PER_EVENT) });
  }
}
