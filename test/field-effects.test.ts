import { describe, expect, it } from "vitest";
import { allEvents, apiJson, datasetRows, expectedEmail, simReset, simStats, startRun, waitForRun } from "./helpers";

describe("a field that calls the play's ctx.tool (a closure over it) instead of its row's", () => {
  it("makes the call as its row's: from executors, each billed once, failed rows failed, reused by a rerun", async () => {
    await simReset();
    const failing = new Set([17, 60, 101]);
    const rows = Array.from({ length: 120 }, (_, i) => ({
      id: `outer-${i}`,
      tool: "sim_find_email",
      input: { name: failing.has(i) ? `!fail Outer Person ${i}` : `Outer Person ${i}`, domain: "outer.test" },
    }));
    const run = await waitForRun(await startRun("test-outer-calls", { rows }));
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ total: 120, completed: 117, failed: 3 });
    const stored = await datasetRows(run.runId, "calls");
    stored.forEach((row, i) => {
      if (failing.has(i)) expect(row._status).toBe("failed");
      else expect(row).toMatchObject({ _status: "completed", out: { email: expectedEmail(`Outer Person ${i}`, "outer.test") } });
    });
    // The map ran in executors (a play-level call in a field made the coordinator run it on its six connections).
    const stats = await simStats();
    const callers = Object.keys(stats.maxInFlightByCaller);
    expect(callers.length).toBeGreaterThan(0);
    expect(callers.every((caller) => caller.startsWith(`MapExecutor:${run.runId}#`))).toBe(true);
    expect(stats.duplicates).toBe(0);
    const lines = (await allEvents(run.runId)).flatMap((e) => (e.type === "log.appended" ? [e.line] : []));
    expect(lines.filter((line) => line.includes("runs in the coordinator"))).toEqual([]);

    const rerun = await waitForRun((await apiJson(`/v1/runs/${run.runId}/rerun`, { method: "POST" })).body.runId);
    expect(rerun.status).toBe("completed");
    expect((await simStats()).calls).toBe(stats.calls);
  });
});
