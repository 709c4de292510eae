/**
 * Progress a user can watch: a row counts as done as soon as its last field
 * returns, while its chunk still runs, not when the whole chunk ends.
 */
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { FAULT_OBJECT_NAME } from "../src/clients/faults";
import { clearFaults, faultState, logLines, SIM_DEFAULTS, setFaults, setSim, until } from "./chaos-helpers";
import { allEvents, chunkCompletions, datasetRows, eventsOfType, simReset, startRun, waitForRun } from "./helpers";

const injector = () => env.FAULTS!.getByName(FAULT_OBJECT_NAME);

afterEach(async () => {
  // Cleared first, then whatever is held let go: the next test's calls are not held.
  await clearFaults();
  await injector().release(0);
  await setSim(SIM_DEFAULTS);
});

describe("row progress", () => {
  it("counts rows of a running chunk as they settle, with the rows in flight and the objects computing them", async () => {
    await simReset();
    // One chunk of 60 one-call rows; six calls in flight at a time (the platform's limit), 100 ms each:
    // the chunk's rows settle over ten waves, each wave after the progress interval.
    await setSim({ ...SIM_DEFAULTS, latencyMs: 100 });
    const rows = Array.from({ length: 60 }, (_, i) => ({
      id: `p${i}`,
      tool: "sim_find_email",
      input: { name: i % 10 === 9 ? `!fail ${i}` : `Row ${i}`, domain: "progress.test" },
    }));
    const runId = await startRun("test-calls", { rows, dataset: "rowprog" }, { testPolicy: { chunkRows: 100 } });
    const run = await waitForRun(runId);
    expect(run.result).toEqual({ total: 60, completed: 54, failed: 6 });

    const events = await allEvents(runId);
    const chunkEnd = chunkCompletions(events)[0]!;
    expect(chunkEnd).toMatchObject({ map: "rowprog", chunk: 0, completed: 54, failed: 6 });
    const before = eventsOfType(events, "map.progress").filter((e) => e.seq < chunkEnd.seq);
    // While the chunk ran, the ledger showed rows done and rows in flight in the one executor computing them
    // (its last report, with every row settled, may come before the chunk's end is recorded).
    const midway = before.filter((e) => e.completed + e.failed > 0);
    expect(midway.filter((e) => e.completed + e.failed < 60).length).toBeGreaterThan(0);
    for (const e of midway) {
      expect(e.executors).toBe(1);
      expect(e.completed + e.failed + e.active).toBe(60);
    }
    expect(before.some((e) => (e.inFlight ?? 0) > 0)).toBe(true);
    // Counts never go backwards.
    const done = eventsOfType(events, "map.progress").map((e) => e.completed + e.failed);
    expect(done).toEqual([...done].sort((a, b) => a - b));

    // In the end, the stored counts alone: nothing in flight, nothing computing.
    expect(run.progress.maps.rowprog).toMatchObject({ completed: 54, failed: 6, active: 0, inFlight: 0, executors: 0 });
    expect(await datasetRows(runId, "rowprog")).toHaveLength(60);
  });

  it("counts the rows of a chunk computed again once each (settled or active, not both), never fewer than before", async () => {
    await simReset();
    await setSim({ ...SIM_DEFAULTS, latencyMs: 300 });
    const held = Array.from({ length: 10 }, (_, i) => ({
      id: `h${i}`,
      tool: "sim_find_email",
      input: { name: `!fail held ${i}`, domain: "p.test" },
    }));
    const own = Array.from({ length: 20 }, (_, i) => ({
      id: `o${i}`,
      tool: "sim_find_email",
      input: { name: i % 2 === 0 ? `!fail ${i}` : `Own ${i}`, domain: "p.test" },
    }));
    // The first run holds ten rows: its first call is held before it is sent, so its chunk cannot end (they fail).
    // The second's one chunk finds them blocked, fails ten of its own, and is dispatched again once they are written:
    // every failed row is computed again. (Without the hold the first run could end before the second claimed.)
    await setFaults([{ point: "provider.before", play: "test-calls", times: 1, hold: true }]);
    const first = await startRun("test-calls", { rows: held, dataset: "reprog" });
    await injector().held(0);
    const second = await startRun("test-calls", { rows: [...held, ...own], dataset: "reprog" });
    await until(
      () => allEvents(second),
      (events) => eventsOfType(events, "map.progress").some((e) => e.blocked > 0),
      "the second run's chunk to find the first run's rows blocked",
    );
    expect(await injector().release(0)).toBe(1);
    await waitForRun(first);
    const run = await waitForRun(second);
    expect(run.result).toEqual({ total: 30, completed: 10, failed: 20 });

    const events = await allEvents(second);
    const progress = eventsOfType(events, "map.progress");
    // Its rows are counted once: settled (stored, or live in the running attempt) or active, never both.
    for (const e of progress) expect(e.completed + e.failed + e.active).toBeLessThanOrEqual(30);
    const done = progress.map((e) => e.completed + e.failed);
    expect(done).toEqual([...done].sort((a, b) => a - b));
    expect(run.progress.maps.reprog).toMatchObject({ completed: 10, failed: 20, active: 0 });
  });

  it("applies a report whose answer was lost once: it is sent again as it was, and its rows and log lines count once", async () => {
    await simReset();
    await setSim({ ...SIM_DEFAULTS, latencyMs: 150 });
    // The coordinator applies the executor's first four reports, and their answers never reach it.
    await setFaults([{ point: "executor.reported", play: "test-map", times: 4 }]);
    const rows = Array.from({ length: 60 }, (_, i) => ({ id: `l${i}`, name: `Lost ${i}`, domain: "answers.test", logChars: 1 }));
    const runId = await startRun("test-map", { rows }, { testPolicy: { chunkRows: 100 } });
    const run = await waitForRun(runId);
    expect(run.result).toMatchObject({ total: 60, completed: 60, failed: 0 });
    expect((await faultState()).counts[0]).toBeGreaterThanOrEqual(4);

    // Each row's line once, though the reports carrying them were sent twice.
    const lines = (await logLines(runId)).filter((line) => line.includes("Lost "));
    expect(lines.sort()).toEqual(rows.map((r) => `[row ${r.id}] ${r.name}: x`).sort());
    // Live counts never past the map's rows.
    const progress = eventsOfType(await allEvents(runId), "map.progress");
    expect(progress.some((e) => e.completed > 0 && e.completed < 60)).toBe(true);
    for (const e of progress) expect(e.completed + e.failed + e.active).toBeLessThanOrEqual(60);
    expect(await datasetRows(runId, "items")).toHaveLength(60);
  });
});
