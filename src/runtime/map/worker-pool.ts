/**
 * A map drain's workers: each takes the queue's next chunks (several for a
 * sweep, or one for an attempt) until none is left or the drain stops, and
 * there are as many as `width` says now. It is asked again after every chunk
 * and as the map's executors grow ({@link WorkerPool.grow}); a worker past it
 * ends after its chunk. A worker that throws (a store write that failed)
 * stops the pool: no chunk more is taken, and the drain ends once the chunks
 * under way have, with that failure.
 */
import type { ChunkRecord } from "../../stores/run-store";
import type { ChunkQueue } from "./chunk-queue";

export interface WorkerPoolOptions {
  queue: ChunkQueue;
  /** How many workers the map should have now. */
  width(): number;
  /** The drain dispatches nothing more (a cancel, a failure, the invocation's budget). */
  stopped(): boolean;
  /** Runs the chunks `take` gave: a sweep of several, or one chunk's attempt. */
  run(group: ChunkRecord[]): Promise<void>;
}

export class WorkerPool {
  #deps: WorkerPoolOptions;
  #working = 0;
  #workers: Promise<void>[] = [];
  /** The first failure of a worker: the pool takes nothing more. */
  #failed: { error: unknown } | null = null;

  constructor(options: WorkerPoolOptions) {
    this.#deps = options;
  }

  /** Workers taking chunks now. */
  get working(): number {
    return this.#working;
  }

  /** Starts workers up to the width, while there is work and the drain goes on. */
  grow(): void {
    const { queue, width, stopped } = this.#deps;
    while (this.#working < width() && queue.hasWork() && !stopped() && !this.#failed) {
      this.#working++;
      this.#workers.push(this.#work());
    }
  }

  /** Resolves once every worker has ended, those started while others ran included; then rejects with the first failure. */
  async settled(): Promise<void> {
    for (let waited = 0; waited < this.#workers.length; ) {
      const batch = this.#workers.slice(waited);
      waited = this.#workers.length;
      await Promise.all(batch);
    }
    if (this.#failed) throw this.#failed.error;
  }

  async #work(): Promise<void> {
    const { queue, width, stopped, run } = this.#deps;
    try {
      while (queue.hasWork() && !stopped() && !this.#failed) {
        await run(queue.take());
        // Wider than the map needs now (the org's lease shrank, or reused chunks gave way to paced ones): one fewer.
        if (this.#working > width()) break;
        this.grow();
      }
    } catch (error) {
      this.#failed ??= { error };
    } finally {
      this.#working--;
    }
  }
}
