import { describe, expect, it } from "vitest";
import type { ChunkRecord } from "../../stores/run-store";
import { planFinalize, type PersistedCounts } from "./finalize";

const chunk = (idx: number, rows: number, completed: number, failed = 0): ChunkRecord => ({
  idx,
  rows,
  resume: null,
  state: "done",
  attemptSeq: 0,
  retries: 0,
  completed,
  failed,
  redispatches: 0,
});
const persisted = (entries: [number, PersistedCounts][]) => new Map(entries);
const base = { map: "leads", total: 120, repairs: 0, maxRepairs: 2 };

describe("planFinalize", () => {
  it("is done when every row is persisted as the chunks reported", () => {
    const chunks = [chunk(0, 50, 50), chunk(1, 50, 48, 2), chunk(2, 20, 20)];
    const rows = persisted([
      [0, { total: 50, completed: 50, failed: 0 }],
      [1, { total: 50, completed: 48, failed: 2 }],
      [2, { total: 20, completed: 20, failed: 0 }],
    ]);
    expect(planFinalize({ ...base, chunks, persisted: rows })).toEqual({ kind: "done", adjust: [] });
  });

  it("takes the counts from the sheets when another run rewrote rows since (all still persisted)", () => {
    const chunks = [chunk(0, 50, 49, 1), chunk(1, 50, 50), chunk(2, 20, 20)];
    const rows = persisted([
      [0, { total: 50, completed: 50, failed: 0 }],
      [1, { total: 50, completed: 50, failed: 0 }],
      [2, { total: 20, completed: 19, failed: 1 }],
    ]);
    expect(planFinalize({ ...base, chunks, persisted: rows })).toEqual({
      kind: "done",
      adjust: [
        { idx: 0, completed: 50, failed: 0 },
        { idx: 2, completed: 19, failed: 1 },
      ],
    });
  });

  it("sends back the chunks with rows unfinished or never claimed", () => {
    const chunks = [chunk(0, 50, 50), chunk(1, 50, 50), chunk(2, 20, 20)];
    const rows = persisted([
      [0, { total: 50, completed: 47, failed: 0 }],
      [1, { total: 50, completed: 50, failed: 0 }],
    ]);
    expect(planFinalize({ ...base, chunks, persisted: rows })).toEqual({ kind: "repair", chunks: [0, 2], missing: 23 });
  });

  it("fails with exact counts once the repairs are spent", () => {
    const chunks = [chunk(0, 50, 50), chunk(1, 50, 49, 1), chunk(2, 20, 20)];
    const rows = persisted([
      [0, { total: 50, completed: 47, failed: 0 }],
      [1, { total: 50, completed: 49, failed: 1 }],
      [2, { total: 10, completed: 10, failed: 0 }],
    ]);
    const plan = planFinalize({ ...base, chunks, persisted: rows, repairs: 2 });
    expect(plan).toEqual({
      kind: "fail",
      message:
        'map "leads": after 2 repairs the sheets hold 106 completed and 1 failed of 120 rows (3 unfinished, 10 never claimed, in chunks 0, 2), ' +
        "but the chunks reported 119 completed and 1 failed; a rerun executes the 13 rows not persisted",
    });
  });

  it("fails when the sheets hold rows of the run past its plan", () => {
    const chunks = [chunk(0, 50, 50)];
    const rows = persisted([
      [0, { total: 50, completed: 50, failed: 0 }],
      [3, { total: 1, completed: 1, failed: 0 }],
    ]);
    expect(planFinalize({ ...base, total: 50, chunks, persisted: rows })).toMatchObject({
      kind: "fail",
      message: expect.stringContaining("past its 50 planned rows (chunks 3)"),
    });
  });
});
