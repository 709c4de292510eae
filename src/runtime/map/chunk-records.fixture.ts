/** Test fixture: a map's chunk as the run store records it, pending, never attempted. */
import type { ChunkRecord } from "../../stores/run-store";

export const pendingChunk = (idx: number, rows = 100): ChunkRecord => ({
  idx,
  rows,
  resume: null,
  state: "pending",
  attemptSeq: 0,
  retries: 0,
  completed: 0,
  failed: 0,
  redispatches: 0,
});
