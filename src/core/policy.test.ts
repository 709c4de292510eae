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
  const fixed = { chunkRows: 100, spreadChunks: 0 };
  const spread = { chunkRows: 100, spreadChunks: 128 };

  it("keeps the policy's chunk size while a map has at most 10,000 chunks of it", () => {
    for (const rows of [0, 1, 1_000_000]) expect(chunkRowsFor(rows, fixed)).toBe(100);
    for (const rows of [12_800, 100_000, 1_000_000]) expect(chunkRowsFor(rows, spread)).toBe(100);
  });

  it("cuts a map of few rows into at least spreadChunks chunks, down to 50 rows each", () => {
    expect(chunkRowsFor(5_900, spread)).toBe(50);
    expect(chunkRowsFor(0, spread)).toBe(50);
    expect(chunkRowsFor(10_000, spread)).toBe(79);
    expect(chunkRowsFor(12_799, spread)).toBe(100);
    // Never past the policy's own size, nor below it when that is smaller.
    expect(chunkRowsFor(500, { chunkRows: 20, spreadChunks: 128 })).toBe(20);
  });

  it("grows chunks past 10,000 of them, up to 1,000 rows", () => {
    for (const policy of [fixed, spread]) {
      expect(chunkRowsFor(1_000_001, policy)).toBe(101);
      expect(chunkRowsFor(10_000_000, policy)).toBe(1_000);
      expect(chunkRowsFor(50_000_000, policy)).toBe(1_000);
    }
  });
});
