/**
 * A map's executors are sized by its provider's pace and latency (src/runtime/executor/sizing.ts). Before any
 * request has been answered, the age of the oldest one still waiting is the latency: a slow provider widens the
 * map during its first answer's wait, not after it.
 */
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import {
  allEvents,
  api,
  apiJson,
  datasetRows,
  eventsOfType,
  expectedEmail,
  notices,
  runView,
  simReset,
  simStats,
  startRun,
  waitForRun,
} from "./helpers";
import { callRows, clearFaults, SIM_DEFAULTS, setFaults, setSim, until } from "./chaos-helpers";

afterEach(async () => {
  await setSim(SIM_DEFAULTS);
  expect((await api("/v1/pacing/sim", { method: "DELETE" })).status).toBe(200);
});

describe("executor sizing", () => {
  it("widens the map while its first requests still wait for an answer", async () => {
    await simReset();
    // 100 requests/s: a request that has waited half a second already asks for 100 × 0.5 × 2.5 / 6 ≈ 21 executors,
    // past the ceiling of 4. The provider answers nothing for ten seconds.
    expect((await api("/v1/pacing/sim", { method: "PUT", json: { requestsPerSecond: 100, concurrency: 250 } })).status).toBe(200);
    await setSim({ ...SIM_DEFAULTS, latencyMs: 10_000 });
    const runId = await startRun(
      "test-calls",
      { rows: callRows(`size${Date.now().toString(36)}`, 600) },
      { testPolicy: { minExecutors: 1, maxExecutors: 4, chunkRows: 50 } },
    );

    // Bounds only a hung test: the first answer would come at ten seconds, and sizing by it is not what this proves.
    const widened = await until(
      async () => (await runView(runId)).progress.maps.calls,
      (map) => map?.executors === 4,
      "the map to reach its ceiling of executors",
      9_000,
    );
    expect(widened).toMatchObject({ completed: 0, failed: 0 });

    expect((await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" })).status).toBe(202);
    expect((await waitForRun(runId)).status).toBe("cancelled");
  });
});

describe("two maps at once", () => {
  it("run on executors of their own: neither stops the other's attempts, and every row is computed once", async () => {
    await simReset();
    await setSim({ ...SIM_DEFAULTS, latencyMs: 100 });
    const rows = Array.from({ length: 300 }, (_, i) => ({ id: `two-${i}`, name: `Two Person ${i}`, domain: "two.test" }));
    const runId = await startRun("test-two-maps", { rows }, { testPolicy: { minExecutors: 2, maxExecutors: 4 } });
    const run = await waitForRun(runId, { timeoutMs: 60_000 });
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toEqual({ left: 300, right: 300 });
    // The two maps make the same 300 calls: the second of each is answered from the first's receipt, or follows it.
    // (The run's own bills: the simulator's count also has the requests the test above left at the provider.)
    expect(run.usage.spend.total).toBe(300);
    expect((await simStats()).duplicates).toBe(0);
    expect(await notices(runId)).not.toContain("attempt_redispatched");
    expect(
      (await allEvents(runId)).filter((e) => e.type === "log.appended" && String((e as { line?: string }).line).includes("superseded")),
    ).toEqual([]);
  });
});

describe("two maps one after the other", () => {
  it("run on the same executors: the second map's attempts replay the play past the first, with no capture timing out", async () => {
    await simReset();
    await setSim({ ...SIM_DEFAULTS, latencyMs: 20 });
    const rows = Array.from({ length: 100 }, (_, i) => ({ id: `seq-${i}`, name: `Seq Person ${i}`, domain: "seq.test" }));
    const runId = await startRun("test-two-maps", { rows, sequential: true }, { testPolicy: { minExecutors: 1, maxExecutors: 1 } });
    const run = await waitForRun(runId, { timeoutMs: 60_000 });
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toEqual({ left: 100, right: 100 });
    const lines = eventsOfType(await allEvents(runId), "log.appended").map((e) => e.line);
    expect(lines.filter((line) => /could not take the fields|did not reach ctx\.map/.test(line))).toEqual([]);
  });

  it("refuses a second map of the same name (it answered the first one's rows and counts): duplicate_map_name", async () => {
    const rows = Array.from({ length: 10 }, (_, i) => ({ id: `dup-${i}`, name: `Dup Person ${i}`, domain: "dup.test" }));
    const run = await waitForRun(await startRun("test-two-maps", { rows, sequential: true, sameName: true }));
    expect(run.status).toBe("failed");
    expect(run.error).toMatchObject({ code: "duplicate_map_name", message: expect.stringContaining('ctx.map("left") was called twice') });
  });
});

describe("a map the play left running when another failed the run (a Promise.all of maps)", () => {
  for (const maxExecutors of [0, 4]) {
    it(`stops before the run ends: no provider call or event after it (maxExecutors ${maxExecutors})`, async () => {
      await simReset();
      await setSim({ ...SIM_DEFAULTS, latencyMs: 50 });
      const rows = Array.from({ length: 300 }, (_, i) => ({
        id: `left-${maxExecutors}-${i}`,
        name: `Left Person ${i}`,
        domain: "left.test",
      }));
      // The second map takes the first's name: refused at once, it fails the run while the first one runs.
      const runId = await startRun("test-two-maps", { rows, sameName: true }, { testPolicy: { maxExecutors } });
      const run = await waitForRun(runId);
      expect(run.error).toMatchObject({ code: "duplicate_map_name" });
      const atEnd = await simStats();
      // The first map went on in the background: hundreds of calls and events after run.failed.
      await new Promise((resolve) => setTimeout(resolve, 1500));
      expect((await simStats()).calls).toBe(atEnd.calls);
      const events = await allEvents(runId);
      expect(events.at(-1)!.type).toBe("run.failed");
      // Every call it billed is in its spend (at 1 credit a find).
      expect((await runView(runId)).usage.spend.total).toBe(atEnd.billed);
    });
  }
});

describe("a map the play left running when another yielded (rows leased by another run)", () => {
  it("stops with the invocation, its chunks back to pending at once: no interrupted invocation, no call twice", async () => {
    await simReset();
    await setSim({ ...SIM_DEFAULTS, latencyMs: 200 });
    const lead = (prefix: string) => (_: unknown, i: number) => ({
      id: `${prefix}-${i}`,
      name: `${prefix} Person ${i}`,
      domain: "inputs.test",
    });
    const shared = Array.from({ length: 10 }, lead("Shared"));
    const holder = await startRun("test-two-inputs", { a: shared, b: [] });
    await until(simStats, (s) => s.calls > 0, "the holder's first calls");
    // Its map a finds its rows leased by the holder and yields while map b has 300 rows to go.
    const runId = await startRun("test-two-inputs", { a: shared, b: Array.from({ length: 300 }, lead("Own")) });
    const run = await waitForRun(runId);
    await waitForRun(holder);
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ a: 10, b: 300 });
    // Map b went on beside the next invocation (calls sent twice), then was stopped with its chunks marked running,
    // which the next invocation took for an interrupted one's.
    expect(await notices(runId)).not.toContain("invocation_resumed");
    expect(await simStats()).toMatchObject({ duplicates: 0, calls: 310 });
  });
});

describe("play-level calls chained at once before a map", () => {
  it("reach the map's fields with their own results, whichever was answered first", async () => {
    await simReset();
    await setSim({ ...SIM_DEFAULTS, latencyMs: 200 });
    const [a, b] = ["chain-a.test", "chain-b.test"];
    // b's two calls are then answered from their receipts at once, a's go to the provider: b's verify is called first.
    expect((await waitForRun(await startRun("test-chained", { domains: [b], rows: [] }))).status).toBe("completed");
    const rows = Array.from({ length: 20 }, (_, i) => ({ id: `chain-${i}`, domain: i % 2 ? b : a }));
    const runId = await startRun("test-chained", { domains: [a, b], rows }, { testPolicy: { minExecutors: 1, maxExecutors: 1 } });
    const run = await waitForRun(runId);
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    const stored = await datasetRows(runId, "chained");
    expect(stored).toHaveLength(20);
    for (const row of stored) expect(row.verified, row._key).toBe(expectedEmail("Chain Lookup", row.domain));
  });
});

describe("a play-level call's failure the play catches before a map", () => {
  afterEach(clearFaults);

  it("is the same error in an executor's replay (a ToolCallError, not retryable): the play goes on to the map there too", async () => {
    await simReset();
    await setFaults([
      { point: "provider.before", tool: "sim_find_email", play: "test-caught", error: { code: "not_found", retryable: false } },
    ]);
    const rows = Array.from({ length: 10 }, (_, i) => ({ id: `caught-${i}` }));
    const runId = await startRun("test-caught", { rows }, { testPolicy: { minExecutors: 1, maxExecutors: 1 } });
    const run = await waitForRun(runId);
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toEqual({ found: "none (not_found)", completed: 10 });
    // No attempt failed taking the fields (the replay threw a plain error, the play rethrew it, the invocation retried).
    const lines = eventsOfType(await allEvents(runId), "log.appended").map((e) => e.line);
    expect(lines.filter((line) => line.includes("could not take the fields"))).toEqual([]);
    for (const row of await datasetRows(runId, "caught")) expect(row.found).toBe("none (not_found)");
  });
});

describe("the org's executor bound", () => {
  it("holds across the maps of one run at once: each map's lease counts against the other's", async () => {
    const org = env.ORG_DIRECTORY.getByName(`org-leases-${crypto.randomUUID()}`);
    const ask = (runId: string, map: string, wanted: number) => org.leaseExecutors({ runId, map, wanted, limit: 4, ttlMs: 60_000 });
    // The second map of the run was granted the whole bound again (one lease per run, the last asking's).
    expect([await ask("run_x", "left", 3), await ask("run_x", "right", 3)]).toEqual([3, 1]);
    // One map giving its lease back leaves the other's standing; a new run gets the rest, up to its fair share.
    expect(await ask("run_x", "left", 0)).toBe(0);
    expect(await ask("run_y", "items", 4)).toBe(2);
  });

  it("is shared by what the holders want: a run that comes while others fill it gets its share as they renew", async () => {
    const org = env.ORG_DIRECTORY.getByName(`org-fair-${crypto.randomUUID()}`);
    const ask = (runId: string, wanted: number) => org.leaseExecutors({ runId, map: "leads", wanted, limit: 8, ttlMs: 60_000 });
    expect(await ask("run_a", 8)).toBe(8);
    // The bound is full: the newcomer runs on one executor...
    expect(await ask("run_b", 8)).toBe(1);
    // ...until the first renews and is trimmed to its share, and the newcomer grows to its own when it renews.
    expect(await ask("run_a", 8)).toBe(4);
    expect(await ask("run_b", 8)).toBe(4);
    // A holder that wants less leaves the rest to the others.
    expect(await ask("run_c", 2)).toBe(1);
    expect(await ask("run_a", 8)).toBe(3);
    expect(await ask("run_c", 2)).toBe(1);
    expect(await ask("run_b", 8)).toBe(3);
    expect(await ask("run_c", 2)).toBe(2);
    expect([await ask("run_a", 8), await ask("run_b", 8)]).toEqual([3, 3]);
  });

  it("counts the executors a trimmed holder still runs against the others until their attempts end", async () => {
    const org = env.ORG_DIRECTORY.getByName(`org-busy-${crypto.randomUUID()}`);
    const ask = (runId: string, wanted: number, busy: number) =>
      org.leaseExecutors({ runId, map: "leads", wanted, busy, limit: 8, ttlMs: 60_000 });
    expect(await ask("run_a", 8, 0)).toBe(8);
    expect(await ask("run_b", 8, 0)).toBe(1);
    // Trimmed to its share, the first still runs eight attempts: the newcomer waits for them.
    expect(await ask("run_a", 8, 8)).toBe(4);
    expect(await ask("run_b", 8, 1)).toBe(1);
    // Its attempts ended down to its share: the newcomer grows to its own.
    expect(await ask("run_a", 8, 4)).toBe(4);
    expect(await ask("run_b", 8, 1)).toBe(4);
  });
});
