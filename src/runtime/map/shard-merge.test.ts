import { describe, expect, it } from "vitest";
import { type ShardBuffer, takeInOrder } from "./shard-merge";

const rows = (...indexes: number[]) => indexes.map((index) => ({ index }));
const indexes = (taken: { index: number }[]) => taken.map((r) => r.index);

describe("takeInOrder", () => {
  it("gives out rows up to the lowest last index of the shards that hold more, and keeps the rest", () => {
    const buffers: ShardBuffer<{ index: number }>[] = [
      { rows: rows(0, 3), more: true },
      { rows: rows(1, 2, 5), more: false },
      { rows: rows(4, 6, 7), more: true },
    ];
    expect(indexes(takeInOrder(buffers))).toEqual([0, 1, 2, 3]);
    expect(buffers.map((b) => indexes(b.rows))).toEqual([[], [5], [4, 6, 7]]);
  });

  it("gives out everything when no shard holds more", () => {
    const buffers = [
      { rows: rows(2, 9), more: false },
      { rows: rows(0, 1, 4), more: false },
    ];
    expect(indexes(takeInOrder(buffers))).toEqual([0, 1, 2, 4, 9]);
    expect(indexes(takeInOrder(buffers))).toEqual([]);
  });

  it("merged with reads of each shard, yields every row once, in order, whatever the spread and gaps", () => {
    // 5 shards over 0..999 with gaps, read 7 rows at a time per shard.
    const all = Array.from({ length: 1000 }, (_, i) => i).filter((i) => i % 13 !== 5);
    const shards = Array.from({ length: 5 }, (_, s) => all.filter((i) => (i * 7 + (i >> 3)) % 5 === s));
    const state = shards.map(() => ({ next: 0, rows: [] as { index: number }[], more: true }));
    const out: number[] = [];
    for (;;) {
      state.forEach((buffer, s) => {
        if (!buffer.more || buffer.rows.length) return;
        const read = shards[s]!.filter((i) => i >= buffer.next).slice(0, 8);
        buffer.more = read.length > 7;
        buffer.rows = rows(...read.slice(0, 7));
        if (buffer.rows.length) buffer.next = buffer.rows.at(-1)!.index + 1;
      });
      const taken = takeInOrder(state);
      if (!taken.length) break;
      out.push(...indexes(taken));
    }
    expect(out).toEqual(all);
  });

  it("refuses a shard that holds more with nothing buffered: its next rows are unknown", () => {
    expect(() => takeInOrder([{ rows: [], more: true }])).toThrow(/read it first/);
  });
});
