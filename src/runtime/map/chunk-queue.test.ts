import { describe, expect, it } from "vitest";
import type { ChunkRecord } from "../../stores/run-store";
import { ChunkQueue } from "./chunk-queue";
import { pendingChunk } from "./chunk-records.fixture";

const chunk = pendingChunk;
const idx = (chunks: ChunkRecord[]) => chunks.map((c) => c.idx);

describe("ChunkQueue", () => {
  it("hands out one chunk at a time until an attempt reuses every row, then consecutive chunks of up to 1,000 rows", () => {
    const queue = new ChunkQueue(
      [...Array(25).keys()].map((i) => chunk(i)),
      { sweepable: true },
    );
    expect(idx(queue.take())).toEqual([0]);
    queue.reusedOnly();
    expect(idx(queue.take())).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(idx(queue.take())).toEqual([11, 12, 13, 14, 15, 16, 17, 18, 19, 20]);
    expect(idx(queue.take())).toEqual([21, 22, 23, 24]);
    expect(queue.hasWork()).toBe(false);
  });

  it("never sweeps past a gap in the chunks, nor past 1,000 rows, nor when the map may not sweep", () => {
    const gapped = new ChunkQueue([chunk(0), chunk(1), chunk(3), chunk(4, 600), chunk(5, 500), chunk(6, 400)], { sweepable: true });
    gapped.reusedOnly();
    expect([idx(gapped.take()), idx(gapped.take()), idx(gapped.take())]).toEqual([
      [0, 1],
      [3, 4],
      [5, 6],
    ]);
    expect(gapped.hasWork()).toBe(false);
    const forced = new ChunkQueue([chunk(0), chunk(1)], { sweepable: false });
    forced.reusedOnly();
    expect(idx(forced.take())).toEqual([0]);
  });

  it("hands back what a sweep left first, one at a time, and stops sweeping", () => {
    const queue = new ChunkQueue(
      [...Array(12).keys()].map((i) => chunk(i)),
      { sweepable: true },
    );
    queue.reusedOnly();
    const swept = queue.take();
    expect(idx(swept)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    queue.giveBack([swept[4]!, swept[7]!]);
    expect([idx(queue.take()), idx(queue.take()), idx(queue.take()), idx(queue.take())]).toEqual([[4], [7], [10], [11]]);
    expect(queue.hasWork()).toBe(false);
  });
});
