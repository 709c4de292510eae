/**
 * A chunk's batch requests of one tool go out at most `batchParallelism` at
 * once (the provider's pacing policy, read as each batch is formed: the gate's
 * first answer may change it). A batch that ends hands its place straight to
 * the oldest one waiting, so a batch formed in the meantime queues behind it
 * rather than going out beside it.
 */
import { getOrInsert } from "../../core/collections";

interface Lane {
  /** Batches in flight, or handed a place and about to go. */
  busy: number;
  waiting: (() => void)[];
}

export class BatchLanes {
  #lanes = new Map<string, Lane>();

  /** Runs `work` once fewer than `limit` batches of `toolId` are in flight (or one ending hands it its place). */
  async run(toolId: string, limit: number, work: () => Promise<void>): Promise<void> {
    const lane = getOrInsert(this.#lanes, toolId, () => ({ busy: 0, waiting: [] }));
    // A place handed over is counted already: the batch that ended never gave it back.
    if (lane.busy >= limit) await new Promise<void>((resolve) => lane.waiting.push(resolve));
    else lane.busy++;
    try {
      await work();
    } finally {
      const next = lane.waiting.shift();
      if (next) next();
      else lane.busy--;
    }
  }
}
