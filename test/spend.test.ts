/**
 * Spend users can trust: every billed call is counted once against its run
 * and org at its tool's price (the simulated provider's bills times prices),
 * a run never bills past its maxSpend however many chunks and batches are in
 * flight, an org past its daily limit starts no run, and a request whose
 * outcome is unknown is never sent again silently to a provider that ignores
 * idempotency keys.
 */
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { billedCredits, callRows, clearFaults, faultState, setFaults, setSim, SIM_DEFAULTS, until } from "./chaos-helpers";
import { allEvents, apiJson, eventsOfType, datasetRows, runView, simReset, simStats, startRun, waitForRun } from "./helpers";

afterEach(async () => {
  await clearFaults();
  await setSim(SIM_DEFAULTS);
});

const leads = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, i) => ({ id: `${prefix}-${i}`, name: `${prefix} Person ${i}`, domain: "spend.test" }));

describe("prices and live spend", () => {
  it("are in the org's day before the run shows as ended", async () => {
    const today = new Date().toISOString().slice(0, 10);
    const dayTotal = async () => (await apiJson(`/v1/spend?from=${today}&to=${today}`)).body.total as number;
    const before = await dayTotal();
    // Hold the run's invocation after it drove the run to its end, before the coordinator's own bookkeeping:
    // whoever sees the run ended from then on must see its spend in the org's day.
    await setFaults([{ point: "run.alarm", play: "demo-enrich", hold: true, times: 1 }]);
    const faults = env.FAULTS!.getByName("faults");
    try {
      const runId = await startRun("demo-enrich", { rows: leads("Counted", 4) });
      await faults.held(0);
      const run = await runView(runId);
      expect(run.status).toBe("completed");
      expect(run.usage.spend.total).toBe(5);
      expect(await dayTotal()).toBe(before + 5);
    } finally {
      await faults.release(0);
    }
  });

  it("count every billed call once at its price, by tool and provider, in progress events and the org's day", async () => {
    await simReset();
    const run = await waitForRun(await startRun("demo-enrich", { rows: leads("Priced", 120) }));
    expect(run.status).toBe("completed");
    const stats = await simStats();
    expect(stats.billed).toBe(240);
    expect(run.usage.spend).toEqual({ total: 150, byProvider: { sim: 150 }, byTool: { sim_find_email: 120, sim_verify_email: 30 } });
    expect(run.usage.spend.total).toBe(billedCredits(stats));
    const progress = eventsOfType(await allEvents(run.runId), "map.progress");
    expect(progress.at(-1)!.spend).toBe(150);
    expect(progress.map((p) => p.spend)).toEqual([...progress.map((p) => p.spend)].sort((a, b) => a - b));

    const today = new Date().toISOString().slice(0, 10);
    const day = (await apiJson(`/v1/spend?from=${today}&to=${today}`)).body;
    expect(day.days).toHaveLength(1);
    expect(day.days[0].byProvider.sim).toBeGreaterThanOrEqual(150);

    // A rerun reuses every row and receipt: it costs nothing.
    const rerun = await waitForRun((await apiJson(`/v1/runs/${run.runId}/rerun`, { method: "POST" })).body.runId);
    expect(rerun.usage.spend.total).toBe(0);
    expect((await simStats()).billed).toBe(240);
  });
});

describe("maxSpend", () => {
  it("is never passed with chunks and batches in flight; the run fails spend_cap_reached and a rerun with a higher cap finishes, paying each call once", async () => {
    await simReset();
    await setSim({ latencyMs: 20 });
    const rows = callRows("Capped", 200);
    const maxSpend = 60;
    const capped = await waitForRun(await submitWith({ rows, dataset: "capped" }, { maxSpend }));
    expect(capped.status).toBe("failed");
    expect(capped.error).toMatchObject({ code: "spend_cap_reached", details: { maxSpend } });
    const spent = capped.error.details.spent;
    expect(spent).toBeLessThanOrEqual(maxSpend);
    expect(capped.usage.spend.total).toBe(spent);
    expect(capped.maxSpend).toBe(maxSpend);
    // What the provider billed is exactly what the run counted: nothing was sent past the cap.
    expect(billedCredits(await simStats())).toBe(spent);

    const rerun = await apiJson(`/v1/runs/${capped.runId}/rerun`, { method: "POST", json: { maxSpend: 1000 } });
    expect(rerun.status).toBe(202);
    const done = await waitForRun(rerun.body.runId);
    expect(done.status).toBe("completed");
    expect(done.result).toEqual({ total: 200, completed: 200, failed: 0 });
    const stats = await simStats();
    expect(stats.duplicates).toBe(0);
    expect(stats.billed).toBe(200);
    // Each call paid once, across both runs.
    expect(billedCredits(stats)).toBe(spent + done.usage.spend.total);
  });

  it("leaves the calls its cap stopped before they were sent sendable: a provider ignoring idempotency keys gets them on the rerun", async () => {
    await simReset();
    await setSim({ latencyMs: 20 });
    // Calls claimed and waiting for a place in the dispatch window when the cap trips were never sent: a rerun must
    // not take them for requests whose outcome is unknown (which such a tool's rows fail).
    const rows = Array.from({ length: 150 }, (_, i) => ({
      id: `uc${i}`,
      tool: "test_unkeyed_find",
      input: { name: `Unkeyed Capped ${i}`, domain: "capped.test" },
    }));
    const capped = await waitForRun(await submitWith({ rows, dataset: "unkeyed-capped" }, { maxSpend: 40 }));
    expect(capped.error).toMatchObject({ code: "spend_cap_reached" });
    // Stopped near its cap, not at the first attempt refused a grant while others held the rest of it (1 credit
    // spent of 40): at most a dispatch window's requests (25) were reserved and not sent when it stopped.
    expect(capped.error.details.spent).toBeGreaterThanOrEqual(40 - 25);
    const done = await waitForRun(
      (await apiJson(`/v1/runs/${capped.runId}/rerun`, { method: "POST", json: { maxSpend: 1000 } })).body.runId,
    );
    const failed = (await datasetRows(done.runId, "unkeyed-capped")).filter((row) => row._status === "failed");
    expect(failed.map((row) => row._error)).toEqual([]);
    expect(done.usage.outcomeUnknown).toBe(0);
    expect(done.result).toEqual({ total: 150, completed: 150, failed: 0 });
    expect((await simStats()).duplicates).toBe(0);
  });
});

describe("maxSpend over child plays", () => {
  it("is not reached while children hold room they have not spent: a cap just above what they bill completes", async () => {
    await simReset();
    const domain = `roomy-${crypto.randomUUID().slice(0, 8)}.test`;
    const accounts = Array.from({ length: 6 }, (_, a) => ({ id: `r${a}`, domain, people: [0, 1, 2, 3].map((p) => `Roomy ${a} ${p}`) }));
    // 30 credits over six children, each asking its parent for many requests' worth at a time: the last to ask wait
    // for their siblings' unspent room (they failed the parent at once, having billed about half of it).
    const started = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-accounts", input: { accounts }, maxSpend: 31 } });
    expect(started.status).toBe(202);
    const run = await waitForRun(started.body.runId, { timeoutMs: 90_000 });
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toEqual({ rows: 6, failed: 0 });
    expect(billedCredits(await simStats())).toBe(30);
  });

  it("counts every child's spend: demo-accounts bills no more than its cap, fails spend_cap_reached, and a rerun with a higher cap finishes paying each call once", async () => {
    await simReset();
    const domain = `capped-${crypto.randomUUID().slice(0, 8)}.test`;
    const accounts = Array.from({ length: 6 }, (_, a) => ({ id: `c${a}`, domain, people: [0, 1, 2, 3].map((p) => `Capped ${a} ${p}`) }));
    // Each person is a find (1 credit) and a verify (0.25): 30 credits over the six children; the parent allows 10.
    const maxSpend = 10;
    const started = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-accounts", input: { accounts }, maxSpend } });
    expect(started.status).toBe(202);
    const capped = await waitForRun(started.body.runId, { timeoutMs: 60_000 });
    expect(capped.status).toBe("failed");
    expect(capped.error).toMatchObject({ code: "spend_cap_reached", details: { maxSpend } });
    const billed = billedCredits(await simStats());
    expect(billed).toBeGreaterThan(0);
    expect(billed).toBeLessThanOrEqual(maxSpend);
    // The cap's error counts the children's spend (at most what they were allotted).
    expect(capped.error.details.spent).toBeGreaterThanOrEqual(billed);
    expect(capped.error.details.spent).toBeLessThanOrEqual(maxSpend);

    const rerun = await apiJson(`/v1/runs/${capped.runId}/rerun`, { method: "POST", json: { maxSpend: 1000 } });
    expect(rerun.status).toBe(202);
    const done = await waitForRun(rerun.body.runId, { timeoutMs: 60_000 });
    expect(done.status).toBe("completed");
    expect(done.result).toEqual({ rows: 6, failed: 0 });
    const stats = await simStats();
    expect(stats.duplicates).toBe(0);
    expect(billedCredits(stats)).toBe(30);
  });
});

async function submitWith(input: unknown, options: Record<string, unknown>): Promise<string> {
  const { status, body } = await apiJson("/v1/runs", { method: "POST", json: { play: "test-calls", input, ...options } });
  if (status !== 202) throw new Error(`start failed: ${status} ${JSON.stringify(body)}`);
  return body.runId;
}

describe("the org's daily limit", () => {
  it("refuses new runs once today's spend reached it, saying why; lifting it lets them start", async () => {
    const token = "other-token";
    await simReset();
    const firstInput = { rows: leads("Daily", 8) };
    const keyed = (key: string, input: unknown) =>
      apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input }, token, headers: { "Idempotency-Key": key } });
    const first = await waitForRun((await keyed("daily-first", firstInput)).body.runId, { token });
    expect(first.usage.spend.total).toBe(10);
    const set = await apiJson("/v1/spend/limits", { method: "PUT", json: { dailyCredits: 10 }, token });
    expect(set.status).toBe(200);
    expect(set.body).toEqual({ dailyCredits: 10, spentToday: 10 });
    expect((await apiJson("/v1/spend/limits", { method: "PUT", json: { dailyCredits: -1 }, token })).status).toBe(400);
    expect((await apiJson("/v1/spend/limits", { method: "PUT", json: { dailyCredits: 1e303 }, token })).status).toBe(400);

    const refused = await apiJson("/v1/runs", {
      method: "POST",
      json: { play: "demo-enrich", input: { rows: leads("Refused", 2) } },
      token,
    });
    expect(refused.status).toBe(409);
    expect(refused.body.error).toMatchObject({ code: "daily_spend_limit_reached", details: { spentToday: 10, dailyCredits: 10 } });
    // A retry of the submit that started the first run gets that run back (it was refused: the client took it for none).
    const retried = await keyed("daily-first", firstInput);
    expect(retried.status).toBe(202);
    expect(retried.body).toMatchObject({ runId: first.runId, status: "completed" });
    // A new key is refused; its retry once the limit is lifted starts the run (below).
    const later = { rows: leads("Later", 1) };
    expect((await keyed("daily-later", later)).status).toBe(409);
    // Another org is not limited by it.
    // (Each run of this test is awaited: a run left going would call the provider during the next test.)
    const elsewhere = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input: { rows: leads("Elsewhere", 1) } } });
    expect(elsewhere.status).toBe(202);
    expect((await waitForRun(elsewhere.body.runId)).status).toBe("completed");

    await apiJson("/v1/spend/limits", { method: "PUT", json: { dailyCredits: 12 }, token });
    // 2 credits left today: a run of 4 rows (5 credits) stops at the daily limit.
    const capped = await waitForRun(await startRun("demo-enrich", { rows: leads("Edge", 4) }, { token }), { token });
    expect(capped.status).toBe("failed");
    expect(capped.error.code).toBe("spend_cap_reached");
    expect(capped.usage.spend.total).toBeLessThanOrEqual(2);
    const day = (await apiJson("/v1/spend", { token })).body;
    expect(day.total).toBe(10 + capped.usage.spend.total);
    expect(day.total).toBeLessThanOrEqual(12);

    await apiJson("/v1/spend/limits", { method: "PUT", json: { dailyCredits: null }, token });
    const lifted = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input: { rows: leads("Lifted", 1) } }, token });
    expect(lifted.status).toBe(202);
    expect((await waitForRun(lifted.body.runId, { token })).status).toBe("completed");
    const liftedRetry = await keyed("daily-later", later);
    expect(liftedRetry.status).toBe(202);
    expect((await waitForRun(liftedRetry.body.runId, { token })).status).toBe("completed");
  });
});

describe("a request whose outcome is unknown", () => {
  it("is not sent again to a provider that ignores idempotency keys: the row fails outcome_unknown, the run counts it, and only retryUnknown sends it", async () => {
    await simReset();
    const rows = Array.from({ length: 6 }, (_, i) => ({
      id: `u${i}`,
      tool: "test_unkeyed_find",
      input: { name: `Unknown Person ${i}`, domain: "unknown.test" },
    }));
    // The invocation dies right after the provider answered the first request, before its receipt is written.
    await setFaults([{ point: "provider.after", tool: "test_unkeyed_find", fromCall: 1, times: 1, crash: true }]);
    const first = await waitForRun(await submitWith({ rows, dataset: "unknown" }, {}));
    expect(first.status).toBe("completed");
    const unknown = (await datasetRows(first.runId, "unknown")).filter((r) => r._status === "failed");
    expect(unknown.length).toBeGreaterThan(0);
    for (const row of unknown) expect(row._error).toContain("outcome_unknown");
    expect(first.usage.outcomeUnknown).toBe(unknown.length);
    expect((await simStats()).duplicates).toBe(0);

    // A plain rerun does not send them again (the run's own count: requests of the crashed invocation may still be arriving at the simulator).
    const again = await waitForRun((await apiJson(`/v1/runs/${first.runId}/rerun`, { method: "POST" })).body.runId);
    expect(again.result.failed).toBe(unknown.length);
    expect(again.usage.providerRequests).toBe(0);

    // Asked to, it does: one request each.
    const retried = await waitForRun(
      (await apiJson(`/v1/runs/${first.runId}/rerun`, { method: "POST", json: { retryUnknown: true } })).body.runId,
    );
    expect(retried.status).toBe("completed");
    expect(retried.result).toEqual({ total: 6, completed: 6, failed: 0 });
    expect(retried.usage.providerRequests).toBe(unknown.length);
  });

  it("is not taken over from a live run still waiting for its answer, past the receipt wait: both runs get the one result", async () => {
    await simReset();
    // The provider answers in 2.5 s; the test policy's receipt wait is 1 s.
    await setSim({ ...SIM_DEFAULTS, latencyMs: 2_500 });
    const row = (id: string) => ({ id, tool: "test_unkeyed_find", input: { name: "Shared Person", domain: "shared.test" } });
    const first = await submitWith({ rows: [row("s1")], dataset: "shared-a" }, {});
    await until(simStats, (s) => s.calls >= 1, "the first run's request at the provider");
    const second = await submitWith({ rows: [row("s2")], dataset: "shared-b" }, {});
    const [a, b] = [await waitForRun(first), await waitForRun(second)];
    expect(a.result).toEqual({ total: 1, completed: 1, failed: 0 });
    expect(b.result).toEqual({ total: 1, completed: 1, failed: 0 });
    const stats = await simStats();
    expect(stats.billed).toBe(1);
    expect(stats.duplicates).toBe(0);
    expect((await datasetRows(second, "shared-b"))[0].out).toEqual((await datasetRows(first, "shared-a"))[0].out);
  });

  it("is not one a cancel cut off before it was sent: a rerun sends those calls, and none fails outcome_unknown", async () => {
    await simReset();
    await setSim({ ...SIM_DEFAULTS, latencyMs: 300 });
    // One executor's six connections at 300 ms for 60 rows: most calls wait for a connection when the run is cancelled.
    const rows = Array.from({ length: 60 }, (_, i) => ({
      id: `c${i}`,
      tool: "test_unkeyed_find",
      input: { name: `Cut Person ${i}`, domain: "cut.test" },
    }));
    const runId = await startRun("test-calls", { rows, dataset: "cut" }, { testPolicy: { minExecutors: 1, maxExecutors: 1 } });
    await until(simStats, (s) => s.calls >= 6, "the first calls at the provider");
    await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" });
    expect((await waitForRun(runId)).status).toBe("cancelled");
    const sent = (await simStats()).calls;
    expect(sent).toBeLessThan(60);

    const rerun = await waitForRun((await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST" })).body.runId);
    expect(rerun.status).toBe("completed");
    // The calls the cancel cut off were never sent: they go now. Those it let finish are reused.
    expect(rerun.result.failed, JSON.stringify((await datasetRows(rerun.runId, "cut")).find((r) => r._status === "failed"))).toBe(0);
    expect(rerun.usage.outcomeUnknown).toBe(0);
    const stats = await simStats();
    expect(stats.duplicates).toBe(0);
    expect(stats.billed).toBe(60);
  });

  it("is not sent again when its provider's lookup of past results fails: the row fails outcome_unknown", async () => {
    await simReset();
    const rows = Array.from({ length: 6 }, (_, i) => ({
      id: `b${i}`,
      tool: "test_unkeyed_blind_find",
      input: { name: `Blind Person ${i}`, domain: "blind.test" },
    }));
    await setFaults([{ point: "provider.after", tool: "test_unkeyed_blind_find", fromCall: 1, times: 1, crash: true }]);
    const run = await waitForRun(await submitWith({ rows, dataset: "blind" }, {}));
    expect(run.status).toBe("completed");
    const unknown = (await datasetRows(run.runId, "blind")).filter((r) => r._status === "failed");
    expect(unknown.length).toBeGreaterThan(0);
    for (const row of unknown) expect(row._error).toContain("outcome_unknown");
    // Sent again with the same key, the simulator would count a duplicate (a provider ignoring keys would bill it twice).
    expect((await simStats()).duplicates).toBe(0);
  });
});

describe("a request whose outcome is unknown, taken over by a capped run", () => {
  it("stays unknown when the cap refuses the takeover: a later run does not send it again", async () => {
    await simReset();
    const row = { id: "t0", tool: "test_unkeyed_blind_find", input: { name: "Taken Person", domain: "taken.test" } };
    // Run a's invocation dies after the provider answered, before the receipt was completed; a is cancelled then.
    await setFaults([{ point: "provider.after", tool: "test_unkeyed_blind_find", fromCall: 1, times: 1, crash: true }]);
    const a = await submitWith({ rows: [row], dataset: "taken-a" }, {});
    await until(faultState, (s) => s.counts[0]! >= 1, "the crash after the provider answered");
    await apiJson(`/v1/runs/${a}/cancel`, { method: "POST" });
    expect((await waitForRun(a)).status).toBe("cancelled");
    await setFaults([]);
    // Run b takes the receipt over, but its cap allows nothing: it fails before asking the provider or sending.
    const b = await waitForRun(await submitWith({ rows: [row], dataset: "taken-b" }, { maxSpend: 0 }));
    expect(b.error).toMatchObject({ code: "spend_cap_reached" });
    // Run c takes it over again: the lookup is down, so how a's request ended is still unknown, and it is not sent.
    const c = await waitForRun(await submitWith({ rows: [row], dataset: "taken-c" }, {}));
    expect(c.result).toEqual({ total: 1, completed: 0, failed: 1 });
    expect((await datasetRows(c.runId, "taken-c"))[0]._error).toMatch(/^outcome_unknown/);
    expect(await simStats()).toMatchObject({ calls: 1, duplicates: 0 });
  });
});

describe("an answer too large to store", () => {
  it("fails its row output_too_large, billed once; a rerun fails it again without paying", async () => {
    await simReset();
    const rows = [0, 1].map((i) => ({ id: `huge-${i}`, tool: "test_huge_find", input: { name: `Huge Person ${i}`, domain: "huge.test" } }));
    const run = await waitForRun(await submitWith({ rows, dataset: "huge" }, {}));
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toEqual({ total: 2, completed: 0, failed: 2 });
    for (const row of await datasetRows(run.runId, "huge")) expect(row._error).toMatch(/^output_too_large/);
    expect(run.usage.spend.total).toBe(2);
    const rerun = await waitForRun((await apiJson(`/v1/runs/${run.runId}/rerun`, { method: "POST" })).body.runId);
    expect(rerun.result).toEqual({ total: 2, completed: 0, failed: 2 });
    expect(rerun.usage.providerRequests).toBe(0);
  });

  it("fails its row output_too_deep when the answer nests past 64 levels, billed once; a rerun fails it again without paying", async () => {
    await simReset();
    const rows = [0, 1].map((i) => ({ id: `deep-${i}`, tool: "test_deep_find", input: { name: `Deep Person ${i}`, domain: "deep.test" } }));
    const run = await waitForRun(await submitWith({ rows, dataset: "deep" }, {}));
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toEqual({ total: 2, completed: 0, failed: 2 });
    for (const row of await datasetRows(run.runId, "deep")) expect(row._error).toMatch(/^output_too_deep/);
    // The provider charged for both answers: they count, in the run and in the org's day.
    expect((await simStats()).billed).toBe(2);
    expect(run.usage.spend.total).toBe(2);
    const rerun = await waitForRun((await apiJson(`/v1/runs/${run.runId}/rerun`, { method: "POST" })).body.runId);
    expect(rerun.result).toEqual({ total: 2, completed: 0, failed: 2 });
    expect(rerun.usage.providerRequests).toBe(0);
    expect(rerun.usage.spend.total).toBe(0);
  });
});

describe("a batch answer its tool cannot split, from a provider that ignores idempotency keys", () => {
  it("fails its members for good, billed once: a rerun does not send them again", async () => {
    await simReset();
    const rows = [0, 1].map((i) => ({ id: `split-${i}`, tool: "test_unkeyed_broken_split", input: { email: `split.${i}@split.test` } }));
    const run = await waitForRun(await submitWith({ rows, dataset: "split" }, {}));
    expect(run.result).toEqual({ total: 2, completed: 0, failed: 2 });
    for (const row of await datasetRows(run.runId, "split")) expect(row._error).toMatch(/^batch_split_failed/);
    // The provider billed both members: they count.
    expect((await simStats()).billed).toBe(2);
    expect(run.usage.spend.total).toBe(0.5);
    const rerun = await waitForRun((await apiJson(`/v1/runs/${run.runId}/rerun`, { method: "POST" })).body.runId);
    expect(rerun.result).toEqual({ total: 2, completed: 0, failed: 2 });
    expect(rerun.usage.providerRequests).toBe(0);
    expect((await simStats()).duplicates).toBe(0);
  });
});

describe("a call its row left behind", () => {
  it("ends under its attempt, billed to the run and stored: a rerun of the call sends nothing", async () => {
    await simReset();
    await setSim({ ...SIM_DEFAULTS, latencyMs: 200 });
    const rows = leads("Stray", 10);
    // Each row's field rejects at once (invalid input) while its valid call waits 200 ms for the provider.
    const run = await waitForRun(await startRun("test-stray-calls", { rows }));
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ total: 10, completed: 0, failed: 10 });
    expect((await simStats()).billed).toBe(10);
    expect(run.usage.spend.total).toBe(10);
    // The calls' receipts were completed: the same calls again are answered from them.
    const again = await waitForRun(
      await startRun("test-calls", {
        rows: rows.map((r) => ({ id: r.id, tool: "sim_find_email", input: { name: r.name, domain: r.domain } })),
        dataset: "stray-again",
      }),
    );
    expect(again.result).toEqual({ total: 10, completed: 10, failed: 0 });
    expect(again.usage.providerRequests).toBe(0);
  });
});

describe("POST /v1/runs/estimate", () => {
  it("is exact where every call's input is known, a range from past runs otherwise, and matches what the run then bills", async () => {
    await simReset();
    // History: a completed run of demo-enrich (each row one find and one verify).
    const history = await waitForRun(await startRun("demo-enrich", { rows: leads("History", 20) }));
    const estimate = (body: unknown) => apiJson("/v1/runs/estimate", { method: "POST", json: body });

    // A rerun of it: everything reused, exactly 0, and no call made.
    const calls = (await simStats()).calls;
    const rerun = await estimate({ play: "demo-enrich", input: { rows: leads("History", 20) } });
    expect(rerun.status).toBe(200);
    expect(rerun.body).toMatchObject({
      rows: { total: 20, reusable: 20, toCompute: 0 },
      spend: { low: 0, expected: 0, high: 0 },
      exact: true,
    });
    expect((await simStats()).calls).toBe(calls);
    expect(history.usage.spend.total).toBe(25);

    // New rows: the first tool's calls are known; the verifications depend on emails not bought yet.
    const fresh = await estimate({ play: "demo-enrich", input: { rows: leads("Fresh", 40) } });
    expect(fresh.body).toMatchObject({
      rows: { total: 40, reusable: 0, toCompute: 40 },
      calls: { sim_find_email: { reused: 0, new: 40 } },
      exact: false,
    });
    expect(fresh.body.spend).toEqual({ low: 40, expected: 50, high: 50 });
    expect((await simStats()).calls).toBe(calls);
    const run = await waitForRun(await startRun("demo-enrich", { rows: leads("Fresh", 40) }));
    expect(run.usage.spend.total).toBe(fresh.body.spend.expected);

    // One call per row, every input known: exact, and the run bills exactly that.
    const rows = callRows("Estimated", 20);
    const exact = await estimate({ play: "test-calls", input: { rows, dataset: "estimated" } });
    expect(exact.body).toMatchObject({
      spend: { low: 12.5, expected: 12.5, high: 12.5 },
      exact: true,
      calls: { sim_find_email: { reused: 0, new: 10 }, sim_verify_email: { reused: 0, new: 10 } },
    });
    const billed = await waitForRun(await submitWith({ rows, dataset: "estimated" }, {}));
    expect(billed.usage.spend.total).toBe(12.5);

    // Ten rows making the same call: one request is billed in the run (the others reuse its receipt), priced once.
    const same = Array.from({ length: 10 }, (_, i) => ({
      id: `same-${i}`,
      tool: "sim_find_email",
      input: { name: "Shared Lookup", domain: "same.test" },
    }));
    const shared = await estimate({ play: "test-calls", input: { rows: same, dataset: "estimated-same" } });
    expect(shared.body.spend.low).toBe(1);
    expect(shared.body.calls.sim_find_email).toEqual({ reused: 0, new: 1 });
    const sharedRun = await waitForRun(await submitWith({ rows: same, dataset: "estimated-same" }, {}));
    expect(sharedRun.usage.spend.total).toBe(shared.body.spend.low);

    // Bad requests are 400s, like POST /v1/runs.
    expect((await estimate({ play: "demo-enrich", input: { rows: [{ nope: 1 }] } })).status).toBe(400);
    expect((await estimate({ play: "no-such-play", input: {} })).status).toBe(404);
  });

  it("reads a bounded sample of an upload whose rows are large, and scales it", async () => {
    // 300 rows of about 40 KB: 12 MB, where 2,000 such rows would be 80 MB in one isolate (it read them all: exact).
    const notes = "n".repeat(40_000);
    const lines = Array.from({ length: 300 }, (_, i) => JSON.stringify({ id: `wide-${i}`, name: `Wide ${i}`, domain: "wide.test", notes }));
    const uploaded = await apiJson("/v1/uploads", {
      method: "POST",
      body: lines.join("\n"),
      headers: { "Content-Type": "application/x-ndjson" },
    });
    expect(uploaded.status).toBe(201);
    const { status, body } = await apiJson("/v1/runs/estimate", {
      method: "POST",
      json: { play: "demo-enrich", input: { upload: uploaded.body.uploadId } },
    });
    expect(status).toBe(200);
    expect(body.rows.total).toBe(300);
    expect(body.calls.sim_find_email.new).toBe(300);
    const sampled = Number(/estimated from its first (\d+), scaled/.exec(body.notes.join(" "))?.[1]);
    expect(sampled).toBeGreaterThan(100);
    expect(sampled).toBeLessThan(300);
  });

  it("is a range with no bound where rows run child plays, prices a call shared under a refresh once, and ends where a map's stored rows are read", async () => {
    await simReset();
    const estimate = (body: unknown) => apiJson("/v1/runs/estimate", { method: "POST", json: body });
    // demo-accounts: each account's leads come from a child play, whose cost the estimate cannot know (it said 0, exact).
    const accounts = { accounts: [{ id: "e0", domain: "estimate-children.test", people: ["Ann", "Bo"] }] };
    const children = await estimate({ play: "demo-accounts", input: accounts });
    expect(children.status).toBe(200);
    expect(children.body).toMatchObject({ exact: false, spend: { low: 0, high: null } });
    expect(children.body.notes.join(" ")).toContain("ctx.runPlay");

    // Under forceToolRefresh ten rows making one call cost one request: the run reuses its own new receipt.
    const same = Array.from({ length: 10 }, (_, i) => ({
      id: `refresh-${i}`,
      tool: "sim_find_email",
      input: { name: "Refreshed", domain: "refresh.test" },
    }));
    const refreshed = await estimate({ play: "test-calls", input: { rows: same, dataset: "estimated-refresh" }, forceToolRefresh: true });
    expect(refreshed.body.calls.sim_find_email).toEqual({ reused: 0, new: 1 });
    expect(refreshed.body.spend).toEqual({ low: 1, expected: 1, high: 1 });
    const run = await waitForRun(await submitWith({ rows: same, dataset: "estimated-refresh" }, { forceToolRefresh: true }));
    expect(run.usage.spend.total).toBe(1);

    // A map over what an earlier map stored: estimated up to the read (the second map cost 0 and the estimate was exact).
    const rows = leads("Staged", 3);
    const staged = await estimate({ play: "test-stages", input: { rows } });
    expect(staged.body).toMatchObject({ exact: false, calls: { sim_find_email: { new: 3 } }, spend: { low: 3, high: null } });
    expect(staged.body.notes.join(" ")).toContain('map "stage-found"');
    const ran = await waitForRun(await startRun("test-stages", { rows }));
    expect(ran.result).toEqual({ found: 3, verified: 3 });
    expect(ran.usage.spend.total).toBe(3.75);
  });
});
