/** What the dashboard shows, folded from reads and live events (pure: no browser, no server). */
import { describe, expect, it } from "vitest";
import type { MapProgress, RunList, RunStatus } from "../src/client/index.ts";
import { MAX_RUNS_PER_PAGE, readNewestRuns } from "../src/dashboard/newest-runs.ts";
import { applyEnd, applyMapProgress, mergeRead, mergeSnapshot, type RunInfo, signalKeyToShow } from "../src/dashboard/run-state.ts";

/** The map "leads" of 10 rows, as `GET /v1/runs/<id>` counts it. */
const leads = (completed: number, failed: number, inFlight = 0): MapProgress => ({
  total: 10,
  completed,
  failed,
  active: inFlight,
  waiting: 0,
  blocked: 0,
  inFlight,
  executors: inFlight ? 1 : 0,
});

/** `GET /v1/runs/<id>` (or a snapshot's run). */
const read = (status: RunStatus, counts: MapProgress): RunInfo => ({
  runId: "run_1",
  play: "demo-enrich",
  org: "dev",
  status,
  runAttempt: 0,
  parentRunId: null,
  progress: { maps: { leads: counts } },
  result: null,
  error: null,
  usage: {},
  createdAt: "",
  updatedAt: "",
});

/** A `map.progress` event while chunks run: their rows count already, with a rate and an ETA. */
const live = (seq: number, completed: number) =>
  ({ seq, type: "map.progress", at: "", map: "leads", ...leads(completed, 1, 1), rowsPerSecond: 4, etaSeconds: 1, spend: 0 }) as const;

/** The run's end, with the counts it ended with: the running chunks' rows were not kept. */
const FINAL = leads(3, 1);
const cancelled = (seq: number) => ({ seq, type: "run.cancelled", at: "", progress: { leads: FINAL } }) as const;

describe("the run page's counts", () => {
  it("while the run is live, a read older than the latest events does not move the counts back", () => {
    const shown = applyMapProgress(mergeRead(null, read("running", leads(2, 0))), live(5, 8));
    const merged = mergeRead(shown, read("running", leads(6, 1)));
    expect(merged.progress.maps.leads).toMatchObject({ completed: 8, failed: 1, rowsPerSecond: 4 });
  });

  it("a read sent before the run started, or before its cancel was taken, does not move its status back", () => {
    const running = mergeRead(null, read("running", leads(2, 0)));
    expect(mergeRead(running, read("queued", leads(0, 0))).status).toBe("running");
    const cancelling = mergeRead(running, read("cancelling", leads(2, 0)));
    expect(mergeRead(cancelling, read("running", leads(3, 0))).status).toBe("cancelling");
    // A run goes from waiting to running and back: both are news.
    const waiting = mergeRead(running, read("waiting", leads(3, 0)));
    expect(waiting.status).toBe("waiting");
    expect(mergeRead(waiting, read("running", leads(3, 0))).status).toBe("running");
    expect(mergeRead(cancelling, read("cancelled", FINAL)).status).toBe("cancelled");
  });

  it("a run that ends cancelled shows the counts it ended with, not the live ones", () => {
    const shown = applyMapProgress(mergeRead(null, read("running", leads(2, 0))), live(5, 8));
    const ended = applyEnd(shown, cancelled(6));
    expect(ended.status).toBe("cancelled");
    expect(ended.progress.maps).toEqual({ leads: FINAL });
    // A read sent before the end answers late: the run stays ended, with its final counts.
    expect(mergeRead(ended, read("running", leads(6, 1)))).toEqual(ended);
    // The read after the end: the server's final counts, nothing from the live events.
    expect(mergeRead(ended, read("cancelled", FINAL)).progress.maps).toEqual({ leads: FINAL });
  });

  it("a page opened on an ended run replays its events from the first and still shows the final counts", () => {
    let shown = mergeRead(null, read("cancelled", FINAL));
    shown = applyMapProgress(shown, live(5, 8));
    expect(shown.progress.maps).toEqual({ leads: FINAL });
    shown = mergeRead(shown, read("cancelled", FINAL));
    shown = applyEnd(shown, cancelled(6));
    expect(shown.progress.maps).toEqual({ leads: FINAL });
  });

  it("a page opened on a live run keeps the snapshot's counts while the events before it replay", () => {
    // The run is at 9 of 10 when the page opens; the feed replays its ledger from the first event.
    let shown = mergeSnapshot(null, read("running", leads(9, 0)), 6);
    for (const seq of [2, 4, 6]) {
      shown = applyMapProgress(shown, live(seq, seq));
      expect(shown.progress.maps.leads).toEqual(leads(9, 0));
    }
    // An event past the snapshot is news.
    shown = applyMapProgress(shown, live(7, 9));
    expect(shown.progress.maps.leads).toMatchObject({ completed: 9, failed: 1, rowsPerSecond: 4 });
  });

  it("after a reconnect, the missed events replayed up to the fresh snapshot do not move its counts back", () => {
    let shown = mergeSnapshot(null, read("running", leads(1, 0)), 2);
    shown = applyMapProgress(shown, live(3, 2));
    // The socket drops after event 3; events 4 and 5 happen; the new socket's snapshot (seq 5) counts 6 done, then 4 and 5 replay.
    shown = mergeSnapshot(shown, read("running", leads(6, 1)), 5);
    shown = applyMapProgress(shown, live(4, 3));
    shown = applyMapProgress(shown, live(5, 5));
    expect(shown.progress.maps.leads).toMatchObject({ completed: 6, failed: 1 });
    // A read answering meanwhile leaves the snapshot's position as it was.
    shown = applyMapProgress(mergeRead(shown, read("running", leads(6, 1))), live(5, 5));
    expect(shown.progress.maps.leads).toMatchObject({ completed: 6, failed: 1 });
    shown = applyMapProgress(shown, live(6, 7));
    expect(shown.progress.maps.leads).toMatchObject({ completed: 7, failed: 1 });
  });

  it("an ended run read while live events showed more keeps the read's counts", () => {
    const shown = applyMapProgress(mergeRead(null, read("running", leads(2, 0))), live(5, 8));
    expect(mergeRead(shown, read("failed", FINAL)).progress.maps).toEqual({ leads: FINAL });
  });
});

describe("the runs page's list", () => {
  /** `GET /v1/runs` over `count` runs, newest first, refusing a limit past the API's. */
  function listOf(count: number) {
    const all = Array.from({ length: count }, (_, i) => ({
      runId: `run_${String(count - i).padStart(4, "0")}`,
      play: "demo-enrich",
      status: "completed" as const,
      parentRunId: null,
      createdAt: "",
      updatedAt: "",
    }));
    return async ({ limit, cursor }: { limit: number; cursor?: string }): Promise<RunList> => {
      if (limit < 1 || limit > MAX_RUNS_PER_PAGE) throw new Error(`limit ${limit} is refused`);
      const start = cursor === undefined ? 0 : Number(cursor);
      const end = start + limit;
      return { runs: all.slice(start, end), nextCursor: end < all.length ? String(end) : null };
    };
  }

  it("'Show more' reaches the oldest run, past the most one page holds", async () => {
    const list = listOf(2 * MAX_RUNS_PER_PAGE + 10);
    let shown = 50;
    let page = await readNewestRuns(list, shown);
    // The reader clicks "Show more" while it is there.
    for (let clicks = 0; page.more && clicks < 100; clicks++) {
      shown += 50;
      page = await readNewestRuns(list, shown);
    }
    expect(page.more).toBe(false);
    expect(page.runs).toHaveLength(2 * MAX_RUNS_PER_PAGE + 10);
    expect(page.runs.at(-1)?.runId).toBe("run_0001");
    expect(new Set(page.runs.map((r) => r.runId)).size).toBe(page.runs.length);
  });

  it("shows the newest runs first, and 'Show more' only while older ones remain", async () => {
    expect(await readNewestRuns(listOf(30), 50)).toMatchObject({ more: false, runs: { length: 30 } });
    const first = await readNewestRuns(listOf(120), 50);
    expect(first).toMatchObject({ more: true, runs: { length: 50 } });
    expect(first.runs[0]?.runId).toBe("run_0120");
    expect(await readNewestRuns(listOf(100), 100)).toMatchObject({ more: false, runs: { length: 100 } });
  });
});

describe("the signal form's key", () => {
  it("follows the play's current wait, unless the user typed a key of their own", () => {
    // Empty: the open wait's key.
    expect(signalKeyToShow("", null, "approve")).toBe("approve");
    // Filled with the last wait's key, which finished: the next wait's (it stayed on approve).
    expect(signalKeyToShow("approve", "approve", "confirm")).toBe("confirm");
    // Typed by the user: kept.
    expect(signalKeyToShow("mine", "approve", "confirm")).toBe("mine");
    // No wait open: whatever the field holds.
    expect(signalKeyToShow("approve", "approve", null)).toBe("approve");
  });
});
