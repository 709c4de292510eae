import { describe, expect, it } from "vitest";
import { ChunkQueue } from "./chunk-queue";
import { pendingChunk } from "./chunk-records.fixture";
import { WorkerPool } from "./worker-pool";

describe("WorkerPool", () => {
  it("takes no chunk more once a worker failed, and rejects only when the chunks under way have ended", async () => {
    const queue = new ChunkQueue(
      [...Array(10).keys()].map((i) => pendingChunk(i)),
      { sweepable: false },
    );
    const taken: number[] = [];
    const ended: number[] = [];
    let release = () => {};
    const slow = new Promise<void>((resolve) => (release = resolve));
    const pool = new WorkerPool({
      queue,
      width: () => 3,
      stopped: () => false,
      run: async ([next]) => {
        taken.push(next!.idx);
        // Chunk 1's worker fails (a store write that threw); chunks 0 and 2 are still under way.
        if (next!.idx === 1) throw new Error("disk full");
        await slow;
        ended.push(next!.idx);
      },
    });
    pool.grow();
    let settled: unknown = null;
    const done = pool.settled().catch((error: unknown) => (settled = error));
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setTimeout(resolve, 0));
    expect(taken).toEqual([0, 1, 2]);
    expect(settled).toBeNull();
    release();
    await done;
    expect(String(settled)).toContain("disk full");
    expect(ended.sort()).toEqual([0, 2]);
    expect(taken).toEqual([0, 1, 2]);
    expect(pool.working).toBe(0);
  });
});
