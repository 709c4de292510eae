/** The CLI's progress fold and its lines (pure: no server). */
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import type { RunView } from "../src/client/index.ts";
import { barMapLine, formatDuration, RunProgress } from "../src/cli/progress.ts";
import { PlainView } from "../src/cli/views.ts";

const run = (status: RunView["status"], completed: number): RunView => ({
  runId: "run_1",
  play: "demo-enrich",
  org: "dev",
  status,
  runAttempt: 0,
  parentRunId: null,
  progress: { maps: { leads: { total: 10, completed, failed: 1, active: 0, waiting: 0, blocked: 0 } } },
  result: null,
  error: null,
  usage: { spend: { total: 2.5, byProvider: {}, byTool: {} } },
  createdAt: "",
  updatedAt: "",
});

/** A map.progress event's counts for the map "leads" of 10 rows. */
const counts = (completed: number, failed: number) => ({ map: "leads", total: 10, completed, failed, active: 0, waiting: 0, blocked: 0 });

describe("RunProgress", () => {
  it("takes status and counts from the snapshot, and ignores replayed events older than it except log lines", () => {
    const progress = new RunProgress("run_1");
    progress.apply({ type: "snapshot", run: run("running", 6), seq: 5 });
    expect(progress.apply({ seq: 1, type: "run.started", at: "", play: "p", runAttempt: 0, parentRunId: null, depth: 0 })).toEqual([]);
    expect(progress.apply({ seq: 2, type: "map.progress", at: "", ...counts(2, 0), rowsPerSecond: 0, etaSeconds: null, spend: 0 })).toEqual(
      [],
    );
    expect(progress.apply({ seq: 3, type: "log.appended", at: "", line: "hello" })).toEqual([{ kind: "log", line: "hello" }]);
    expect(progress.status).toBe("running");
    expect(progress.maps.get("leads")).toMatchObject({ completed: 6, failed: 1 });

    progress.apply({
      seq: 6,
      type: "map.progress",
      at: "",
      ...counts(8, 1),
      rowsPerSecond: 4,
      etaSeconds: 1,
      spend: 3.25,
    });
    expect(progress.maps.get("leads")).toMatchObject({ completed: 8, rowsPerSecond: 4, etaSeconds: 1 });
    expect(progress.spend).toBe(3.25);
    expect(progress.apply({ seq: 7, type: "run.completed", at: "", result: null, progress: {} })).toEqual([
      { kind: "status", status: "completed" },
    ]);
  });
});

describe("lines", () => {
  it("draws a bar with done and failed cells, and the figures known", () => {
    const map = { name: "leads", total: 10, completed: 4, failed: 1, rowsPerSecond: 2.5, etaSeconds: 125 };
    expect(barMapLine(map, { nameWidth: 6, width: 10 })).toBe("leads   [████▓░░░░░]  5/10  1 failed  2.5 rows/s  ETA 2m 05s");
    expect(barMapLine({ ...map, completed: 9 }, { nameWidth: 5, width: 10, spend: 12.345 })).toBe(
      "leads  [█████████▓]  10/10  1 failed  spend 12.35 credits",
    );
    expect(formatDuration(7322)).toBe("2h 02m");
  });

  it("plain output: a map's line at most once a second while it runs, and once when it is done", () => {
    const out = new PassThrough();
    let text = "";
    out.on("data", (d: Buffer) => (text += d.toString()));
    let now = 0;
    const view = new PlainView(out, () => now);
    const progress = new RunProgress("run_1");
    const step = (seq: number, completed: number) =>
      view.update(
        progress,
        progress.apply({ seq, type: "map.progress", at: "", ...counts(completed, 0), rowsPerSecond: 2, etaSeconds: null, spend: 2.5 }),
      );
    view.update(progress, progress.apply({ type: "snapshot", run: run("running", 0), seq: 0 }));
    step(1, 2);
    now = 1500;
    step(2, 4);
    step(3, 10);
    step(4, 10);
    expect(text.trim().split("\n")).toEqual([
      "run_1 running",
      "run_1 leads: 1/10 done, 1 failed, spend 2.5 credits",
      "run_1 leads: 4/10 done, 0 failed, 2.0 rows/s, spend 2.5 credits",
      "run_1 leads: 10/10 done, 0 failed, spend 2.5 credits",
    ]);
  });
});
