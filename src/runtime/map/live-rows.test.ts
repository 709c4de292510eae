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
});
