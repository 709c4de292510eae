/** The CLI's progress fold and its lines (pure: no server). */
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import type { LiveMessage, RunView, TroupeClient } from "../src/client/index.ts";
import { TroupeApiError } from "../src/client/errors.ts";
import { describeError } from "../src/cli/exit-codes.ts";
import { barFrame, barMapLine, formatDuration, RunProgress } from "../src/cli/progress.ts";
import { TerminalView } from "../src/cli/TerminalView.ts";
import { PlainView, type RunWatchView, summaryOf } from "../src/cli/views.ts";
import { watchRun } from "../src/cli/watch.ts";

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

describe("a cancelled run's status", () => {
  it("is cancelling from the cancel's answer until its end, whatever its play does meanwhile", () => {
    const progress = new RunProgress("run_1");
    progress.apply({ type: "snapshot", run: run("waiting", 2), seq: 3 });
    progress.apply({ seq: 4, type: "wait.started", at: "", key: "approval" } as unknown as LiveMessage);
    expect(progress.cancelAnswered("cancelling")).toEqual([{ kind: "status", status: "cancelling" }]);
    // The cancel ends the wait; the run is still being cancelled.
    expect(progress.apply({ seq: 5, type: "wait.finished", at: "", key: "approval" } as unknown as LiveMessage)).toEqual([]);
    expect(progress.status).toBe("cancelling");
    progress.apply({ seq: 6, type: "run.cancelled", at: "", progress: { leads: run("cancelled", 3).progress.maps.leads! } });
    expect(progress.status).toBe("cancelled");
    // An answer that comes after the end changes nothing.
    expect(progress.cancelAnswered("cancelling")).toEqual([]);
  });
});

describe("watching a run", () => {
  it("the last frame shows the counts the run ended with, without a rate or an ETA", async () => {
    // Live counts include the rows of running chunks; the cancelled run did not keep them.
    const feed: LiveMessage[] = [
      { type: "snapshot", run: run("running", 2), seq: 0 },
      { seq: 1, type: "map.progress", at: "", ...counts(8, 1), rowsPerSecond: 4, etaSeconds: 1, spend: 2.5 },
      { seq: 2, type: "run.cancelled", at: "", progress: { leads: run("cancelled", 3).progress.maps.leads! } },
    ];
    const client = {
      async *events() {
        yield* feed;
      },
      get: async () => run("cancelled", 3),
    } as unknown as TroupeClient;
    const frames: string[] = [];
    const view: RunWatchView = {
      update: () => {},
      pause: () => {},
      resume: () => {},
      note: () => {},
      // What TerminalView draws last.
      finish: (progress) => frames.push(barFrame(progress, 120)),
    };
    const end = await watchRun({ client, runId: "run_1", view, interrupt: { kind: "detach" } });
    expect(end).toMatchObject({ kind: "ended", run: { status: "cancelled" } });
    expect(frames).toHaveLength(1);
    expect(frames[0]).toMatch(/^run_1 {2}demo-enrich {2}cancelled\nleads {2}\[[█▓░]{30}\] {2}4\/10 {2}1 failed {2}spend 2\.5 credits$/);
  });

  it("a run that ended while the server restarts ends the watch with its status, read once the server is back", async () => {
    const feed: LiveMessage[] = [
      { type: "snapshot", run: run("running", 2), seq: 0 },
      { seq: 1, type: "run.completed", at: "", result: null, progress: { leads: run("completed", 10).progress.maps.leads! } },
    ];
    let reads = 0;
    const client = {
      async *events() {
        yield* feed;
      },
      get: async () => {
        if (++reads === 1)
          throw new TroupeApiError({ status: 0, code: "unreachable", message: "could not reach the server (ECONNREFUSED)" });
        return run("completed", 10);
      },
    } as unknown as TroupeClient;
    const view: RunWatchView = { update: () => {}, pause: () => {}, resume: () => {}, note: () => {}, finish: () => {} };
    const end = await watchRun({ client, runId: "run_1", view, interrupt: { kind: "detach" } });
    expect(end).toMatchObject({ kind: "ended", run: { status: "completed" } });
    expect(reads).toBe(2);
  });

  it("terminal: log lines that arrive while the Ctrl-C question is open are printed once it closes", () => {
    const out = Object.assign(new PassThrough(), { columns: 120 });
    let text = "";
    out.on("data", (d: Buffer) => (text += d.toString()));
    const view = new TerminalView(out);
    const progress = new RunProgress("run_1");
    view.update(progress, progress.apply({ type: "snapshot", run: run("running", 2), seq: 0 }));
    view.pause();
    view.update(progress, progress.apply({ seq: 1, type: "log.appended", at: "", line: "asked while paused" }));
    expect(text).not.toContain("asked while paused");
    view.resume(progress);
    expect(text).toContain("log: asked while paused\n");
    view.finish(progress, null);
    expect(text.split("asked while paused")).toHaveLength(2);
  });
});

describe("text from the server", () => {
  it("prints a log line's and an error's control characters as \\x escapes, never to the terminal", () => {
    const progress = new RunProgress("run_1");
    progress.apply({ type: "snapshot", run: run("running", 0), seq: 0 });
    // An OSC 52 clipboard write and a cursor move, as a scraped page or a provider's answer could carry them.
    const line = "row says \u001b]52;c;cm0gLXJm\u0007 then \u001b[2Aup\ttab";
    expect(progress.apply({ seq: 1, type: "log.appended", at: "", line })).toEqual([
      { kind: "log", line: "row says \\x1b]52;c;cm0gLXJm\\x07 then \\x1b[2Aup\ttab" },
    ]);
    const printed = summaryOf({ ...run("failed", 0), error: { code: "play_failed", message: "bad \u001b[31mred\u009b" } });
    expect(printed).toContain("play_failed: bad \\x1b[31mred\\x9b");
    expect(printed).not.toContain("\u001b");
  });

  it("prints an error's code and fields, and a note quoting the server, with control characters escaped", () => {
    const error = new TroupeApiError({
      status: 400,
      code: "bad\u001b[2J",
      message: "refused",
      details: [{ path: "input.\u001b]52;c;eA==\u0007", message: "no" }],
    });
    const described = describeError(error);
    expect(described).toBe("bad\\x1b[2J: refused (input.\\x1b]52;c;eA==\\x07)");
    let text = "";
    const out = Object.assign(new PassThrough(), { columns: 120 });
    out.on("data", (d: Buffer) => (text += d.toString()));
    new PlainView(out).note("the cancel was not accepted (\u001b[31mno\u009b)");
    new TerminalView(out).note("paused? \u001b[2A");
    expect(text).toContain("the cancel was not accepted (\\x1b[31mno\\x9b)");
    expect(text).not.toContain("\u001b[31m");
    expect(text).not.toContain("\u001b[2A");
  });
});
