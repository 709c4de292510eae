import { describe, expect, it } from "vitest";
import { currentRank, withRank } from "./request-rank";

describe("request ranks", () => {
  it("follow a row's work across its awaits, and rows apart keep their own", async () => {
    const rankAfterWaits = (rank: number) =>
      withRank(rank, async () => {
        await Promise.resolve();
        await new Promise((r) => setTimeout(r, 5 - rank));
        return currentRank();
      });
    expect(await Promise.all([rankAfterWaits(1), rankAfterWaits(2), rankAfterWaits(3)])).toEqual([1, 2, 3]);
    expect(currentRank()).toBe(Number.POSITIVE_INFINITY);
  });
});
