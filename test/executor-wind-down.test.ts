/**
 * An executor invocation near the platform's limits winds its attempts down
 * (src/runtime/executor/wind-down.ts): they send no request more, store the
 * rows they computed and go on with the rest in a fresh invocation, under the
 * same attempt. Production's thresholds (8,000 subrequests, 12 minutes) are
 * shrunk per run here, so that one chunk winds down several times.
 */
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MAX_OUTBOUND_IN_FLIGHT } from "../src/core/platform-limits";
import { MAX_STALLED_WIND_DOWNS } from "../src/runtime/map/chunk-outcomes";
import { updateSimConfig } from "../src/sim/client";
import {
  allEvents,
  api,
  datasetRows,
  eventsOfType,
  expectedEmail,
  expectedVerdict,
  notices,
  simReset,
  simStats,
  startRun,
  waitForRun,
} from "./helpers";
import { callRows, clearFaults, crash, expectExactlyOnce as expectCallsOnce, faultState, heldBy, setFaults, until } from "./chaos-helpers";

let unique = 0;
const id = () => `wd${Date.now().toString(36)}${unique++}`;

/** One executor, one chunk of `count` leads: every call of the run is made by the attempt that winds down. */
const oneChunk = { minExecutors: 1, maxExecutors: 1, chunkRows: 100 };

/** Leads of names no other test calls the provider for (receipts are the org's: a name seen before is reused). */
function leads(count: number) {
  const batch = id();
  return Array.from({ length: count }, (_, i) => ({ id: `${batch}-${i}`, name: `Wind ${batch} ${i}`, domain: "example.com" }));
}

/** The run completed every lead with the provider's answers, each call billed once, and never redispatched a chunk. */
async function expectWhole(runId: string, rows: ReturnType<typeof leads>) {
  const run = await waitForRun(runId);
  expect(run.status, JSON.stringify(run.error)).toBe("completed");
  expect(run.result).toEqual({ rows: rows.length, failed: 0 });
  await expectExactlyOnce(runId, rows);
  const events = await allEvents(runId);
  const codes = events.flatMap((e) => (e.type === "log.appended" && e.code ? [e.code] : []));
  const lines = events.flatMap((e) => (e.type === "log.appended" ? [e.line] : [])).join("\n");
  // The same attempt went on: nothing was redispatched, no epoch fenced off, no lease lost.
  for (const code of ["attempt_redispatched", "invocation_resumed", "leases_lost", "late_write_rejected"] as const)
    expect(codes, lines).not.toContain(code);
  return { run, windDowns: codes.filter((code) => code === "attempt_wound_down").length };
}

beforeEach(async () => {
  await simReset();
});

afterEach(async () => {
  await updateSimConfig(env, { latencyMs: 0 });
});

describe("an executor invocation near its subrequest limit", () => {
  it("winds its attempt down and goes on in fresh invocations: every row once, every call billed once", async () => {
    await updateSimConfig(env, { latencyMs: 20 });
    const rows = leads(100);
    const runId = await startRun("demo-enrich", { rows }, { testPolicy: { ...oneChunk, executorWindDownSubrequests: 60 } });
    const { windDowns } = await expectWhole(runId, rows);
    // 200 calls and their receipts, at 60 subrequests an invocation: several wind-downs.
    expect(windDowns).toBeGreaterThanOrEqual(2);

    // Each invocation stopped sending soon after the threshold: what it spent past 60 is what was in flight then
    // (six connections), their receipts, the rows' persist and the reports; not the rest of the chunk's 200 calls.
    const spent = (await allEvents(runId)).flatMap((event) =>
      event.type === "log.appended" && event.code === "attempt_wound_down" ? [Number(/\((\d+) subrequests/.exec(event.line)?.[1])] : [],
    );
    expect(spent.length).toBe(windDowns);
    for (const total of spent) expect(total).toBeLessThan(60 + 60);
  });

  it("has not stalled while it buys calls, though more invocations than the stall rule allows pass before a row settles", async () => {
    const rows = leads(100);
    // At 30 subrequests an invocation, the chunk's 100 finds take more invocations than MAX_STALLED_WIND_DOWNS before
    // its first verification batch goes (the first row to settle); each of them bought finds the next reuses.
    const runId = await startRun("demo-enrich", { rows }, { testPolicy: { ...oneChunk, executorWindDownSubrequests: 30 } });
    const { windDowns } = await expectWhole(runId, rows);
    expect(windDowns).toBeGreaterThan(MAX_STALLED_WIND_DOWNS);
  });

  it("fails a chunk that settles no row and buys no call invocation after invocation: chunk_stalled, not redispatched", async () => {
    const rows = leads(20);
    // 5 subrequests: each invocation's leases and lookups take them all before the first call.
    const runId = await startRun("demo-enrich", { rows }, { testPolicy: { ...oneChunk, executorWindDownSubrequests: 5 } });
    const run = await waitForRun(runId);
    expect(run.status).toBe("failed");
    expect(run.error?.code, JSON.stringify(run.error)).toBe("chunk_stalled");
    expect(run.error?.message).toContain('map "leads" chunk 0: 3 invocations in a row wound down without settling a row');
    // Failed as the coordinator fails a stall of its own: not retried as a broken store under a new epoch each time.
    const events = await allEvents(runId);
    const codes = events.flatMap((e) => (e.type === "log.appended" && e.code ? [e.code] : []));
    expect(codes).not.toContain("attempt_redispatched");
    expect(events.filter((e) => e.type === "log.appended" && e.line.includes("infrastructure error"))).toEqual([]);
    expect((await simStats()).calls).toBe(0);
  });

  it("fails a chunk whose calls each wind-down refuses before they leave: a call stored as not sent is no progress", async () => {
    const rows = leads(20);
    // 8 subrequests: the calls are claimed, then refused by the wind-down before they go out (their receipts say so).
    const runId = await startRun("demo-enrich", { rows }, { testPolicy: { ...oneChunk, executorWindDownSubrequests: 8 } });
    // Before: each refusal stored counted as progress, and the run went on for ever, an invocation every 50 ms.
    const run = await waitForRun(runId);
    expect(run.status).toBe("failed");
    expect(run.error?.code, JSON.stringify(run.error)).toBe("chunk_stalled");
  });

  it("carries what the attempt was granted to spend: a run capped at its exact cost still completes", async () => {
    const rows = leads(100);
    // 1.25 credits a lead (find 1, verify 0.25). An attempt's unused grant left reserved at each wind-down would
    // leave the next too little and fail the run spend_cap_reached.
    const runId = await startRun("demo-enrich", { rows }, { maxSpend: 125, testPolicy: { ...oneChunk, executorWindDownSubrequests: 60 } });
    const { run, windDowns } = await expectWhole(runId, rows);
    expect(windDowns).toBeGreaterThanOrEqual(2);
    expect(run.usage.spend.total).toBe(125);
  });
});

describe("an executor invocation near its time limit", () => {
  it("winds its attempt down as well: the requests in flight are answered and stored, the rest sent from the next invocation", async () => {
    await updateSimConfig(env, { latencyMs: 100 });
    const rows = leads(120);
    // 240 calls at six at a time, 100 ms each: about 4 s, over invocations of a second. An invocation must settle a
    // row (its verification batch sent and answered): three in a row that settle none (and buy nothing) are a stalled
    // attempt, which fails the run. Invocations of 400 ms settled none beside three busy CPUs.
    const runId = await startRun("demo-enrich", { rows }, { testPolicy: { ...oneChunk, chunkRows: 120, executorWindDownMs: 1000 } });
    const { windDowns } = await expectWhole(runId, rows);
    expect(windDowns).toBeGreaterThanOrEqual(2);
  });
});

describe("a coordinator invocation near its time limit", () => {
  it("has its executors wind their attempts down and hand back the rows they left, which its next invocation runs", async () => {
    await updateSimConfig(env, { latencyMs: 100 });
    const rows = callRows(`Handed${id()}`, 200);
    // 200 calls at six at a time, 100 ms each: over three seconds, past a coordinator invocation of 1.5 s. An attempt
    // goes on past its executor's invocation, but its coordinator's alarm, which waits for it, runs 15 minutes at most.
    const runId = await startRun(
      "test-calls",
      { rows },
      { testPolicy: { minExecutors: 1, maxExecutors: 1, chunkRows: 200, coordinatorWindDownMs: 1_500 } },
    );
    const run = await waitForRun(runId);
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    await expectCallsOnce(runId, "calls", rows);
    const events = await allEvents(runId);
    const lines = events.flatMap((e) => (e.type === "log.appended" ? [e.line] : [])).join("\n");
    // Handed back to the coordinator, not gone on in the executor: the coordinator's own line says so.
    const handedBack = events.filter(
      (e) => e.type === "log.appended" && e.code === "attempt_wound_down" && e.line.includes("go on in the next"),
    );
    expect(handedBack.length, lines).toBeGreaterThanOrEqual(1);
    // The same attempt went on: nothing was redispatched under a new epoch, no lease was lost.
    const codes = events.flatMap((e) => (e.type === "log.appended" && e.code ? [e.code] : []));
    for (const code of ["attempt_redispatched", "invocation_resumed", "leases_lost", "late_write_rejected"] as const)
      expect(codes, lines).not.toContain(code);
  });

  // Invocations of 0.7 s (the coordinator's, whose executor hands the rows back; or the coordinator's own attempt's),
  // finds of a second: each invocation sends six finds and winds down once they are answered and stored (the next
  // invocation reuses them). The verification batch waits for every find; so five pass before the first row settles.
  for (const [where, testPolicy] of [
    ["its executor", { ...oneChunk, coordinatorWindDownMs: 700 }],
    ["the coordinator itself", { maxExecutors: 0, chunkRows: 100, executorWindDownMs: 700 }],
  ] as const)
    it(`has not stalled while its calls are answered, though more invocations than the stall rule allows wind down before a row settles (run by ${where})`, async () => {
      await updateSimConfig(env, { latencyMs: 1_000 });
      const rows = leads(30);
      const runId = await startRun("demo-enrich", { rows }, { testPolicy });
      const run = await waitForRun(runId);
      expect(run.status, JSON.stringify(run.error)).toBe("completed");
      await expectExactlyOnce(runId, rows);
      const woundDown = (await allEvents(runId)).filter(
        (e) => e.type === "log.appended" && e.code === "attempt_wound_down" && e.line.includes("go on in the next"),
      );
      expect(woundDown.length).toBeGreaterThan(MAX_STALLED_WIND_DOWNS);
    });
});

describe("an executor evicted around a wind-down", () => {
  afterEach(async () => {
    await clearFaults();
  });

  it("after the wound-down attempt stored its rows, before it was held to go on: its chunk is redispatched, every row once", async () => {
    const rows = leads(100);
    // The chunk's first persist is its first wind-down's (one chunk, one attempt): the executor dies right after it.
    await setFaults([{ point: "sheet.persisted", play: "demo-enrich", fromCall: 1, times: 1, crash: true }]);
    const runId = await startRun("demo-enrich", { rows }, { testPolicy: { ...oneChunk, executorWindDownSubrequests: 60 } });
    const run = await waitForRun(runId);
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    await expectExactlyOnce(runId, rows);
  });

  it("with calls in flight, its redispatch winds down before it has learned how they ended: that attempt goes on with them", async () => {
    await updateSimConfig(env, { latencyMs: 200 });
    const rows = leads(100);
    // Dies after its fourth answer, other requests in flight and the rest claimed: the next epoch takes all 100 over,
    // asking the provider of each before calling again, more lookups than an invocation of 40 subrequests makes. That
    // redispatch is the only one the run allows.
    await setFaults([{ point: "provider.after", play: "demo-enrich", fromCall: 4, times: 1, crash: true }]);
    const testPolicy = { ...oneChunk, executorWindDownSubrequests: 40, maxChunkRedispatches: 1 };
    const runId = await startRun("demo-enrich", { rows }, { testPolicy });
    const run = await waitForRun(runId);
    // Before: a wind-down that left a takeover unresolved lost the chunk to a new epoch, which took it all over again
    // (chunk_redispatch_exhausted); and lookups counted while they waited for a connection spent each invocation's
    // budget before one was answered (chunk_stalled).
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    await expectExactlyOnce(runId, rows);
    // Each call taken over is asked about once (a request the dead executor had in flight, still being answered, maybe
    // twice more): a lookup in flight at a wind-down is answered and kept, not asked again (before: 129 to 131).
    expect(run.usage.providerLookups).toBeLessThanOrEqual(rows.length + 2 * MAX_OUTBOUND_IN_FLIGHT);
    const codes = await notices(runId);
    expect(codes.filter((code) => code === "attempt_redispatched")).toHaveLength(1);
    expect(codes).toContain("call_recovered");
    expect(codes).toContain("attempt_wound_down");
  });

  it("while it holds the attempt to go on: the next alarm, in a new instance, goes on with it", async () => {
    await updateSimConfig(env, { latencyMs: 50 });
    const rows = leads(100);
    // Killed just after it held the attempt, before its next invocation (a crash polled for from here caught the
    // executor running the attempt again as often, beside busy CPUs).
    await setFaults([{ point: "executor.held", play: "demo-enrich", times: 1, crash: true }]);
    const runId = await startRun("demo-enrich", { rows }, { testPolicy: { ...oneChunk, executorWindDownSubrequests: 60 } });
    const { windDowns } = await expectWhole(runId, rows);
    // The first hold crashed it (the rule's first call); the attempt went on, unredispatched (expectWhole).
    expect((await faultState()).counts[0]).toBeGreaterThanOrEqual(1);
    expect(windDowns).toBeGreaterThanOrEqual(1);
  });
});

/** Every lead completed with the provider's answers and each call billed once, however the chunk was redispatched. */
async function expectExactlyOnce(runId: string, rows: ReturnType<typeof leads>) {
  const stored = await datasetRows(runId, "leads");
  expect(stored).toHaveLength(rows.length);
  const byKey = new Map(stored.map((row) => [row._key, row]));
  for (const row of rows) {
    const email = expectedEmail(row.name, row.domain);
    expect(byKey.get(row.id)).toMatchObject({ _status: "completed", email, verdict: expectedVerdict(email) });
  }
  expect(await simStats()).toMatchObject({ billed: 2 * rows.length, duplicates: 0 });
}

describe("a field that catches its call's error", () => {
  it("does not store what it made of a call the wind-down refused: the row goes on in the next invocation", async () => {
    await updateSimConfig(env, { latencyMs: 50 });
    const rows = leads(100);
    // Rows wait for the executor's six connections: at each wind-down, most have a call refused, which they catch.
    const runId = await startRun("test-catching", { rows }, { testPolicy: { ...oneChunk, executorWindDownMs: 300 } });
    const run = await waitForRun(runId);
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(await notices(runId)).toContain("attempt_wound_down");
    const stored = new Map((await datasetRows(runId, "leads")).map((row) => [row._key, row]));
    for (const row of rows) expect(stored.get(row.id)).toMatchObject({ _status: "completed", email: expectedEmail(row.name, row.domain) });
    expect(await simStats()).toMatchObject({ billed: rows.length, duplicates: 0 });
  });
});

describe("a field that catches a call it made through the play's ctx (a closure), refused by a wind-down", () => {
  for (const [where, policy] of [
    ["in an executor", { ...oneChunk, executorWindDownMs: 300 }],
    ["in the coordinator", { ...oneChunk, maxExecutors: 0, executorWindDownSubrequests: 60 }],
  ] as const) {
    it(`${where}: the call was its row's, so what the field made of the refusal is not stored`, async () => {
      await updateSimConfig(env, { latencyMs: 50 });
      const rows = leads(100);
      const runId = await startRun("test-catching", { rows, outer: true }, { testPolicy: policy });
      const run = await waitForRun(runId);
      expect(run.status, JSON.stringify(run.error)).toBe("completed");
      expect(await notices(runId)).toContain("attempt_wound_down");
      const stored = new Map((await datasetRows(runId, "leads")).map((row) => [row._key, row]));
      for (const row of rows)
        expect(stored.get(row.id)).toMatchObject({ _status: "completed", email: expectedEmail(row.name, row.domain) });
      expect(await simStats()).toMatchObject({ billed: rows.length, duplicates: 0 });
    });
  }
});

describe("a run cancelled while its attempt winds down and goes on", () => {
  it("sends nothing more: no attempt held or resumed after the cancel calls the provider", async () => {
    await updateSimConfig(env, { latencyMs: 50 });
    const rows = leads(100);
    const runId = await startRun("demo-enrich", { rows }, { testPolicy: { ...oneChunk, executorWindDownMs: 200 } });
    await until(
      () => notices(runId),
      (codes) => codes.filter((code) => code === "attempt_wound_down").length >= 2,
      "two wind-downs",
    );
    expect((await api(`/v1/runs/${runId}/cancel`, { method: "POST" })).status).toBe(202);
    expect((await waitForRun(runId)).status).toBe("cancelled");
    await until(
      () => heldBy(`${runId}#0`),
      (held) => held.length === 0,
      "the executor to hold nothing",
    );
    const calls = (await simStats()).calls;
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect((await simStats()).calls).toBe(calls);
    expect((await simStats()).duplicates).toBe(0);
  });
});

describe("a coordinator invocation near its subrequest limit, running a map's chunks itself", () => {
  it("winds its attempt down too: the chunk keeps what it did, and the next invocation runs only the rows it left", async () => {
    await updateSimConfig(env, { latencyMs: 20 });
    const rows = leads(100);
    // No executors: the coordinator runs the chunk, and its invocation winds down every 60 subrequests or so.
    const runId = await startRun(
      "demo-enrich",
      { rows },
      { testPolicy: { ...oneChunk, maxExecutors: 0, executorWindDownSubrequests: 60 } },
    );
    const { run, windDowns } = await expectWhole(runId, rows);
    expect(windDowns).toBeGreaterThanOrEqual(2);
    // The chunk's rows were computed once each, none counted as reused (a chunk claimed again whole would count its
    // own rows so).
    const completed = eventsOfType(await allEvents(runId), "chunks.completed").flatMap((e) => e.chunks);
    expect(completed).toEqual([expect.objectContaining({ chunk: 0, completed: 100, failed: 0, reused: 0 })]);
    expect(run.progress.maps.leads).toMatchObject({ completed: 100, failed: 0 });
  });
});
