import { describe, expect, it } from "vitest";
import { checkSplit, planBatches } from "./batching";

describe("planBatches", () => {
  it("cuts members into as few batches as the limit allows, evenly, in order", () => {
    const members = Array.from({ length: 120 }, (_, i) => i);
    const batches = planBatches(members, 50);
    expect(batches.map((b) => b.length)).toEqual([40, 40, 40]);
    expect(batches.flat()).toEqual(members);
    expect(planBatches(members.slice(0, 300), 50).length).toBe(3);
    expect(
      planBatches(
        Array.from({ length: 300 }, (_, i) => i),
        50,
      ).map((b) => b.length),
    ).toEqual([50, 50, 50, 50, 50, 50]);
    expect(
      planBatches(
        Array.from({ length: 51 }, (_, i) => i),
        50,
      ).map((b) => b.length),
    ).toEqual([26, 25]);
    expect(planBatches([], 50)).toEqual([]);
    expect(planBatches([1, 2, 3], 1)).toEqual([[1], [2], [3]]);
  });

  it("refuses a limit that is not a positive integer", () => {
    expect(() => planBatches([1], 0)).toThrow("positive integer");
    expect(() => planBatches([1], 1.5)).toThrow("positive integer");
  });
});

describe("checkSplit", () => {
  it("accepts one well-formed result per member", () => {
    const results = [
      { ok: true, output: 1 },
      { ok: false, error: { code: "x", message: "m", retryable: false } },
    ];
    expect(checkSplit(results, 2, "t")).toBe(results);
  });

  it("refuses a split that cannot be attributed to members", () => {
    expect(() => checkSplit({}, 1, "t")).toThrow("not an array");
    expect(() => checkSplit([{ ok: true, output: 1 }], 2, "t")).toThrow("1 results for 2 members");
    expect(() => checkSplit([{ output: 1 }], 1, "t")).toThrow("result 0");
    expect(() => checkSplit([{ ok: false, error: "boom" }], 1, "t")).toThrow("result 0");
  });
});
