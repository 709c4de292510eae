import { describe, expect, it } from "vitest";
import { chunkRowsFor, shardCountFor } from "./policy";

const production = { sheetShards: 4, sheetRowsPerShard: 250_000, maxSheetShards: 64 };

describe("shardCountFor", () => {
  it("gives small and empty datasets the policy's minimum", () => {
    for (const rows of [0, 1, 300, 100_000, 1_000_000]) expect(shardCountFor(rows, production)).toBe(4);
  });

  it("adds a shard per sheetRowsPerShard rows past the minimum, rounding up", () => {
    expect(shardCountFor(1_000_001, production)).toBe(5);
    expect(shardCountFor(2_000_000, production)).toBe(8);
    expect(shardCountFor(10_000_000, production)).toBe(40);
  });

  it("stops at maxSheetShards however many rows", () => {
    expect(shardCountFor(16_000_000, production)).toBe(64);
    expect(shardCountFor(16_000_001, production)).toBe(64);
    expect(shardCountFor(1e12, production)).toBe(64);
  });

  it("never goes below sheetShards, even when it is above the maximum", () => {
    expect(shardCountFor(10, { ...production, sheetShards: 80 })).toBe(80);
  });

  it("treats a negative count as empty", () => {
    expect(shardCountFor(-5, production)).toBe(4);
  });
});

describe("chunkRowsFor", () => {
  it("keeps the policy's chunk size while a map has at most 10,000 chunks of it", () => {
    for (const rows of [0, 1, 1_000_000]) expect(chunkRowsFor(rows, { chunkRows: 100 })).toBe(100);
  });

  it("grows chunks past 10,000 of them, up to 1,000 rows", () => {
    expect(chunkRowsFor(1_000_001, { chunkRows: 100 })).toBe(101);
    expect(chunkRowsFor(10_000_000, { chunkRows: 100 })).toBe(1_000);
    expect(chunkRowsFor(50_000_000, { chunkRows: 100 })).toBe(1_000);
  });
});
