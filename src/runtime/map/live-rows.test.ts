import { describe, expect, it } from "vitest";
import { LiveRows } from "./live-rows";

const stored = { total: 100, completed: 40, failed: 0, active: 50, waiting: 10, blocked: 0 };

describe("LiveRows", () => {
  it("counts rows settled in running chunks as done, and rows computing now as in flight", () => {
    const live = new LiveRows();
    for (let i = 0; i < 5; i++) live.started("m", 1);
    live.started("m", 2);
    live.settled("m", 1, "completed");
    live.settled("m", 1, "completed");
    live.settled("m", 1, "failed");
    live.settled("m", 2, "stopped");
    expect(live.apply("m", stored)).toEqual({ ...stored, completed: 42, failed: 1, active: 47, inFlight: 2, executors: 1 });
    expect(live.apply("other", { ...stored, active: 0 })).toEqual({ ...stored, active: 0, inFlight: 0, executors: 0 });
  });

  it("drops a chunk's rows when its attempt ends: from then on its stored counts hold them", () => {
    const live = new LiveRows();
    live.started("m", 1);
    live.settled("m", 1, "completed");
    live.ended("m", 1);
    expect(live.apply("m", stored)).toEqual({ ...stored, inFlight: 0, executors: 1 });
  });

  it("adds a resumed chunk's live rows to what its wound-down attempt stored: they are other rows", () => {
    const live = new LiveRows();
    for (let i = 0; i < 3; i++) live.started("m", 1);
    live.settled("m", 1, "completed");
    live.settled("m", 1, "completed");
    const running = { ...stored, completed: 0, active: 100, waiting: 0 };
    // 60 rows stored before the wind-down, 2 of the 40 left settled since.
    expect(live.apply("m", running, [{ chunk: 1, completed: 60, failed: 0, resumed: true }])).toMatchObject({ completed: 62, active: 38 });
    // A chunk computed again whole shows the larger of the two.
    expect(live.apply("m", running, [{ chunk: 1, completed: 60, failed: 0 }])).toMatchObject({ completed: 60, active: 40 });
  });
});
