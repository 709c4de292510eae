import { describe, expect, it } from "vitest";
import {
  allEvents,
  chunkCompletions,
  datasetRows,
  expectedEmail,
  expectedVerdict,
  simReset,
  simStats,
  startRun,
  waitForRun,
} from "./helpers";

/** 300 leads: every 30th fails permanently, every 25th (not failing) is flaky once. */
function leads(prefix: string, count = 300) {
  return Array.from({ length: count }, (_, i) => {
    const name = i % 30 === 7 ? `!fail ${prefix} ${i}` : i % 25 === 3 ? `!flaky ${prefix}  Person ${i}` : `${prefix} Person  ${i}`;
    return { id: `${prefix}-${i}`, name, domain: `Example${i % 7}.COM` };
  });
}

function uniqueCalls(rows: ReturnType<typeof leads>) {
  const ok = rows.filter((r) => !r.name.startsWith("!fail"));
  const emails = new Set(ok.map((r) => expectedEmail(r.name, r.domain)));
  return { find: ok.length, verify: emails.size, failing: rows.length - ok.length };
}

describe("a run of demo-enrich, end to end", () => {
  it("computes every row, persists failures, and bills each unique call once", async () => {
    await simReset();
    const input = leads("e2e");
    const runId = await startRun("demo-enrich", { rows: input });
    const run = await waitForRun(runId);
    const expected = uniqueCalls(input);

    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ rows: 300 - expected.failing, failed: expected.failing });
    expect(run.progress.maps.leads).toMatchObject({
      total: 300,
      completed: 300 - expected.failing,
      failed: expected.failing,
      active: 0,
      waiting: 0,
      blocked: 0,
    });

    const rows = await datasetRows(runId, "leads");
    expect(rows).toHaveLength(300);
    rows.forEach((row, i) => {
      const source = input[i]!;
      expect(row).toMatchObject({ id: source.id, name: source.name, domain: source.domain, _key: source.id });
      if (source.name.startsWith("!fail")) {
        expect(row._status).toBe("failed");
        expect(row._error).toContain("person_not_found");
      } else {
        const email = expectedEmail(source.name, source.domain);
        expect(row).toMatchObject({ _status: "completed", _error: null, email, verdict: expectedVerdict(email) });
      }
    });

    const stats = await simStats();
    expect(stats.duplicates).toBe(0);
    expect(stats.billed).toBe(expected.find + expected.verify);
    // The run's executors made every provider call, each within production's six requests in flight
    // (PLATFORM_LIMITS=emulate); the coordinator made none.
    const callers = Object.keys(stats.maxInFlightByCaller);
    expect(callers.length).toBeGreaterThan(1);
    for (const caller of callers) {
      expect(caller).toMatch(new RegExp(`^MapExecutor:${runId}#\\d+$`));
      expect(stats.maxInFlightByCaller[caller]).toBeLessThanOrEqual(6);
    }
    expect(stats.byTool.sim_find_email.billed).toBe(expected.find);
    expect(stats.byTool.sim_verify_email.billed).toBe(expected.verify);

    const events = await allEvents(runId);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events[0]!.type).toBe("run.started");
    expect(events.at(-1)!.type).toBe("run.completed");
  });

  it("reruns reuse rows and receipts; force recomputes rows without billing; forceToolRefresh re-bills", async () => {
    await simReset();
    const input = leads("rerun", 120);
    const expected = uniqueCalls(input);
    const first = await waitForRun(await startRun("demo-enrich", { rows: input }));
    expect(first.status).toBe("completed");
    const afterFirst = await simStats();
    expect(afterFirst.billed).toBe(expected.find + expected.verify);

    // A plain rerun: completed rows are reused, failed rows run again (their permanent failure is remembered).
    const rerunId = await startRun("demo-enrich", { rows: input });
    const rerun = await waitForRun(rerunId);
    expect(rerun.result).toEqual(first.result);
    const afterRerun = await simStats();
    expect(afterRerun.calls).toBe(afterFirst.calls);
    expect(afterRerun.billed).toBe(afterFirst.billed);
    const rerunChunks = chunkCompletions(await allEvents(rerunId));
    expect(rerunChunks.reduce((n, e) => n + e.reused, 0)).toBe(120 - expected.failing);
    const rerunRows = await datasetRows(rerunId, "leads");
    expect(rerunRows.filter((r) => r._status === "failed")).toHaveLength(expected.failing);

    // force: every row is recomputed, but every tool result comes from its receipt.
    const forcedId = await startRun("demo-enrich", { rows: input }, { force: true });
    const forced = await waitForRun(forcedId);
    expect(forced.result).toEqual(first.result);
    const forcedChunks = chunkCompletions(await allEvents(forcedId));
    expect(forcedChunks.reduce((n, e) => n + e.reused, 0)).toBe(0);
    expect((await simStats()).billed).toBe(afterFirst.billed);

    // forceToolRefresh: a deliberate re-bill of every successful call, still with no duplicate keys.
    const refreshed = await waitForRun(await startRun("demo-enrich", { rows: input }, { forceToolRefresh: true }));
    expect(refreshed.result).toEqual(first.result);
    const afterRefresh = await simStats();
    expect(afterRefresh.billed).toBe(2 * (expected.find + expected.verify));
    expect(afterRefresh.duplicates).toBe(0);
  });

  it("takes its rows as CSV with quotes, embedded commas and newlines", async () => {
    const csv = 'id,name,domain\n1,"Lovelace, Ada",example.com\n2,"Grace\nHopper",navy.mil\n3,"Alan ""The"" Turing",example.org\n';
    const runId = await startRun("demo-enrich", { csv });
    expect((await waitForRun(runId)).status).toBe("completed");
    const rows = await datasetRows(runId, "leads");
    expect(rows.map((r) => [r.id, r.name, r.email])).toEqual([
      ["1", "Lovelace, Ada", expectedEmail("Lovelace, Ada", "example.com")],
      ["2", "Grace\nHopper", expectedEmail("Grace\nHopper", "navy.mil")],
      ["3", 'Alan "The" Turing', expectedEmail('Alan "The" Turing', "example.org")],
    ]);
  });
});
