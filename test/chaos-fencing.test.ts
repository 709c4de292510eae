/**
 * Chaos, part 2: fencing and leases. A stale attempt's late writes arrive
 * after its chunk was redispatched and are rejected (reported by key, nothing
 * overwritten); heartbeats keep a slow attempt's leases so another run never
 * executes its rows; an attempt whose leases lapse is stopped and its chunk
 * redispatched under a new epoch.
 */
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { sheetShardName } from "../src/clients/shards";
import type { AttemptRef } from "../src/contracts/shards";
import { allEvents, chunkCompletions, notices, simReset, simStats, startRun, waitForRun } from "./helpers";
import { callRows, clearFaults, expectExactlyOnce, setSim, SIM_DEFAULTS, until } from "./chaos-helpers";

afterEach(async () => {
  await clearFaults();
  await setSim(SIM_DEFAULTS);
});

const LONG_MS = 60_000;

describe("a stale attempt after redispatch", () => {
  it("has its late persist, completion and heartbeat rejected at the shards, by key, and overwrites nothing", async () => {
    const runId = `run_chaos_${crypto.randomUUID().replaceAll("-", "")}`;
    const sheet = env.SHEET_SHARD.getByName(`chaos-${crypto.randomUUID()}/0`);
    const receipts = env.RECEIPT_SHARD.getByName(`chaos-${crypto.randomUUID()}`);
    const stale: AttemptRef = { attemptId: `${runId}/items/0/0`, runId, attemptSeq: 0 };
    const fresh: AttemptRef = { attemptId: `${runId}/items/0/1`, runId, attemptSeq: 1 };
    const rows = ["k1", "k2"].map((key, index) => ({ key, index, input: { name: key } }));
    const claimRows = (attempt: AttemptRef) => sheet.claimRows({ attempt, leaseTtlMs: LONG_MS, recompute: false, rows });
    const claimReceipt = (attempt: AttemptRef) =>
      receipts.claim({ attempt, leaseTtlMs: LONG_MS, refresh: false, items: [{ key: "r1", toolId: "sim_find_email" }] });

    expect((await claimRows(stale)).rows.map((r) => r.status)).toEqual(["pending", "pending"]);
    expect((await claimReceipt(stale)).results).toEqual([{ key: "r1", disposition: "claimed", generation: 0 }]);
    // The coordinator redispatches the chunk under epoch 1: the new attempt takes rows and receipt over.
    expect((await claimRows(fresh)).rows.map((r) => r.status)).toEqual(["pending", "pending"]);
    expect((await claimReceipt(fresh)).results).toEqual([
      { key: "r1", disposition: "claimed", generation: 0, takeover: true, unknownOutcome: true },
    ]);
    const write = (attempt: AttemptRef, by: string) =>
      sheet.persistRows({
        attempt,
        rows: rows.map((r) => ({ key: r.key, status: "completed" as const, data: { name: r.key, by }, error: null })),
      });
    expect(await write(fresh, "fresh")).toEqual({ written: ["k1", "k2"], rejected: [] });
    expect(await receipts.complete({ attempt: fresh, items: [{ key: "r1", output: { by: "fresh" } }] })).toEqual({
      accepted: ["r1"],
      rejected: [],
    });

    // The stale attempt wakes up late: every write and heartbeat is refused and says which keys.
    expect(await write(stale, "stale")).toEqual({ written: [], rejected: ["k1", "k2"] });
    expect(await receipts.complete({ attempt: stale, items: [{ key: "r1", output: { by: "stale" } }] })).toEqual({
      accepted: [],
      rejected: ["r1"],
    });
    expect(await sheet.renewLeases({ attempt: stale, keys: ["k1", "k2"], leaseTtlMs: LONG_MS })).toEqual({
      renewed: [],
      lost: ["k1", "k2"],
    });
    expect(await receipts.renew({ attempt: stale, keys: ["r1"], leaseTtlMs: LONG_MS })).toEqual({ renewed: [], lost: ["r1"] });

    const stored = (await sheet.readRunRows({ runId, fromIndex: 0, toIndex: 10 })).rows;
    expect(stored.map((r) => [r.key, r.status, r.data.by])).toEqual([
      ["k1", "completed", "fresh"],
      ["k2", "completed", "fresh"],
    ]);
    expect(await receipts.get({ key: "r1" })).toMatchObject({ status: "completed", output: { by: "fresh" }, owner: fresh });
  });

  it("in a run: an attempt whose leases lapsed writes late, is rejected and logged, and its chunk is redone from the other run's rows", async () => {
    await simReset();
    await setSim({ latencyMs: 700 });
    const rows = callRows("Stale", 40);
    // The first run's heartbeat never comes before its short leases lapse, while its calls are still at the provider.
    const stalled = await startRun(
      "test-calls",
      { rows, dataset: "stale" },
      { testPolicy: { rowLeaseTtlMs: 200, receiptLeaseTtlMs: 200, heartbeatIntervalMs: LONG_MS } },
    );
    await until(simStats, (s) => s.calls > 0, "the first run's calls in flight");
    const other = await startRun("test-calls", { rows, dataset: "stale" }, { testPolicy: { blockedRetries: 50 } });

    const [first, second] = [await waitForRun(stalled), await waitForRun(other)];
    expect([first.status, second.status]).toEqual(["completed", "completed"]);
    expect(await notices(stalled)).toContain("late_write_rejected");
    expect(first.runAttempt).toBeGreaterThanOrEqual(1);
    // The other run took the lapsed receipts over and recovered the first run's answers from the provider.
    await expectExactlyOnce(other, "stale", rows, rows.length, [other, stalled]);
    await expectExactlyOnce(stalled, "stale", rows, rows.length, [other, stalled]);
  });
});

describe("heartbeats", () => {
  it("keep a slow attempt's leases alive: another run over the same rows waits for them and executes none", async () => {
    await simReset();
    await setSim({ latencyMs: 2500 });
    // 8 finds and one batch of 8 verifies: two turns of the coordinator's six requests in flight, 5 s of slow calls.
    const rows = callRows("Beat", 16);
    // Leases of 2 s would lapse during one 2.5 s call; the heartbeat renews them every 100 ms, so only a beat held
    // up for 1.9 s could lose them. (At 1 s, a 900 ms stall lost them once, in a CI run beside four other suites
    // on two cores: the chunk was redispatched, as it should be, and this test's premise was gone.)
    const owner = await startRun(
      "test-calls",
      { rows, dataset: "beat" },
      { testPolicy: { rowLeaseTtlMs: 2000, receiptLeaseTtlMs: 2000, heartbeatIntervalMs: 100 } },
    );
    await until(simStats, (s) => s.calls > 0, "the owner's calls in flight");
    const waiter = await startRun("test-calls", { rows, dataset: "beat" }, { testPolicy: { blockedRetries: 50 } });

    const [first, second] = [await waitForRun(owner), await waitForRun(waiter)];
    expect([first.status, second.status]).toEqual(["completed", "completed"]);
    expect(first.runAttempt).toBe(0);
    expect(
      (await notices(owner)).filter((code) => code === "leases_lost" || code.endsWith("_redispatched") || code === "late_write_rejected"),
    ).toEqual([]);
    const waiterEvents = await allEvents(waiter);
    expect(waiterEvents.some((e) => e.type === "map.progress" && e.blocked > 0)).toBe(true);
    // The waiter computed nothing: every row came back completed by the owner.
    const done = chunkCompletions(waiterEvents);
    expect(done.reduce((sum, e) => sum + e.reused, 0)).toBe(rows.length);
    await expectExactlyOnce(waiter, "beat", rows, rows.length, [owner, waiter]);
  });

  it("that learn the leases were lost stop the attempt, and the coordinator redispatches its chunk under a new epoch", async () => {
    await simReset();
    await setSim({ latencyMs: 600 });
    const rows = callRows("Lost", 40);
    const runId = await startRun("test-calls", { rows, dataset: "lost" }, { testPolicy: { heartbeatIntervalMs: 50 } });
    await until(simStats, (s) => s.calls > 0, "calls in flight");
    // The row leases vanish under the live attempt (as if another attempt had taken them): its next beat finds out.
    await Promise.all(
      [0, 1, 2, 3].map((shard) => env.SHEET_SHARD.getByName(sheetShardName("dev", "test-calls", "lost", shard)).releaseRun({ runId })),
    );
    const run = await waitForRun(runId);

    expect(run.status).toBe("completed");
    expect(run.runAttempt).toBeGreaterThanOrEqual(1);
    const codes = await notices(runId);
    expect(codes).toContain("leases_lost");
    expect(codes.some((code) => code === "attempt_redispatched" || code === "late_write_rejected")).toBe(true);
    await expectExactlyOnce(runId, "lost", rows);
  });

  it("that stall make the attempt stop by its own clock before its leases expire", async () => {
    await simReset();
    await setSim({ latencyMs: 300 });
    const rows = callRows("Stall", 40);
    // Leases of 500 ms and no beat for a minute: the attempt must not go on calling providers on leases it cannot vouch for.
    // (Batches go out after 20 ms, well within a lease.) Six requests in flight at a time cannot finish 40 rows within
    // one lease, so every attempt stops by its clock and the chunk takes several (each recovering what the last one
    // sent): it may be redispatched more often than the policy's default allows.
    const runId = await startRun(
      "test-calls",
      { rows, dataset: "stall" },
      {
        testPolicy: {
          rowLeaseTtlMs: 500,
          receiptLeaseTtlMs: 500,
          heartbeatIntervalMs: LONG_MS,
          batchGraceMs: 20,
          maxChunkRedispatches: 40,
        },
      },
    );
    const run = await waitForRun(runId);

    expect(run.status).toBe("completed");
    expect(run.runAttempt).toBeGreaterThanOrEqual(1);
    expect(await notices(runId)).toContain("leases_lost");
    await expectExactlyOnce(runId, "stall", rows);
  });
});
