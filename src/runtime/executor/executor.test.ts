import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { CaptureSource } from "../../clients/executors";
import type { AttemptReport, BilledRequest, SpendGrant } from "../../contracts/executors";
import { createSql } from "../../stores/sql";
import { RunStore } from "../../stores/run-store";
import { runStoreWithRun } from "../../stores/run-schema.fixture";
import { toMicros } from "../../stores/spend-store";
import { LiveRows } from "../map/live-rows";
import { ExecutorAttempts } from "./executor-attempts";
import { definePlay } from "../../play/define";
import type { RowContext } from "../../play/types";
import { z } from "zod";
import { SpendCapReached } from "../tools/spend";
import { captureMap, CaptureUnsupported } from "./capture";
import { callIdentity, fetchIdentity } from "../invocation/effect-trace";
import { ExecutorSpend } from "./executor-spend";
import { handedBack } from "./attempt-runner";
import type { ChunkAssignment, ChunkSummary } from "../../contracts/executors";

describe("ExecutorSpend", () => {
  const request = (n: number, credits = 1) => ({ requestKey: `k${n}`, toolId: "t", provider: "p", credits });

  it("asks the coordinator for grants under a cap, keeps every bill, and refuses once nothing is granted", async () => {
    const kept: string[] = [];
    const grants = [25_000_000, 0];
    const asked: number[] = [];
    const ledger = new ExecutorSpend({
      attemptId: "a1",
      capped: true,
      grant: async (wanted): Promise<SpendGrant> => {
        asked.push(wanted);
        return { grantedMicros: grants.shift() ?? 0, spentCredits: 25, cap: { credits: 25, reason: "maxSpend" } };
      },
      keep: (bill) => {
        kept.push(bill.requestKey);
        // Reserved under this attempt's grant: the bill says so (the coordinator shrinks that grant by it).
        expect(bill.grantOf).toBe("a1");
      },
    });
    // 25 requests of one credit fit the first grant, asked once by all of them together.
    await Promise.all(Array.from({ length: 25 }, (_, n) => ledger.reserve(request(n))));
    expect(asked).toEqual([25_000_000]);
    for (let n = 0; n < 25; n++) ledger.bill(`k${n}`);
    expect(kept).toHaveLength(25);
    await expect(ledger.reserve(request(25))).rejects.toBeInstanceOf(SpendCapReached);
    // A bill is kept once, however often it is recorded.
    ledger.recordBilled(request(3));
    expect(kept).toHaveLength(25);
  });

  it("asks nothing without a cap", async () => {
    const ledger = new ExecutorSpend({
      attemptId: "a1",
      capped: false,
      grant: async () => expect.fail("no cap, no grant"),
      keep: () => {},
    });
    await ledger.reserve(request(1, 1000));
    ledger.release("k1");
  });

  it("names no grant for a request billed without its reservation", () => {
    const kept: BilledRequest[] = [];
    const ledger = new ExecutorSpend({
      attemptId: "a1",
      capped: true,
      grant: async () => expect.fail("nothing reserved"),
      keep: (b) => kept.push(b),
    });
    ledger.recordBilled(request(7));
    expect(kept).toEqual([request(7)]);
  });
});

describe("ExecutorAttempts, spend under a cap", () => {
  const report = (attemptId: string, bills: BilledRequest[], end: AttemptReport["end"] = null): AttemptReport => ({
    executor: "e0",
    attemptId,
    map: "m",
    chunk: 0,
    rows: { started: 0, completed: 0, failed: 0, stopped: 0 },
    logs: [],
    bills,
    salvage: [],
    usage: { rpc: 0, provider: 0, retries: 0, rateLimited: 0, lookups: 0, outcomeUnknown: 0, rpcByKind: {} },
    latency: [],
    waiting: [],
    draining: false,
    end,
  });
  const bill = (n: number, grantOf: string): BilledRequest => ({ requestKey: `k${n}`, toolId: "t", provider: "p", credits: 1, grantOf });

  it("shrinks the grant each bill was reserved under, when another attempt of the executor reports it", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`grants-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const store = new RunStore({ sql: createSql(state.storage), now: Date.now });
      const attempts = new ExecutorAttempts({ store, live: new LiveRows(), emit: () => {}, now: Date.now, onLateWork: () => {} });
      const cap = toMicros(50);
      // A draining attempt and the next one alongside it on the same executor: 25 credits each, the whole cap.
      expect(store.spend.grant("a", toMicros(25), cap)).toBe(toMicros(25));
      expect(store.spend.grant("b", toMicros(25), cap)).toBe(toMicros(25));
      // b's report carries the five bills a made (the executor's one outbox), then a ends.
      attempts.apply(
        report(
          "b",
          [1, 2, 3, 4, 5].map((n) => bill(n, "a")),
        ),
      );
      attempts.apply(
        report("a", [], {
          kind: "summary",
          summary: { completed: 5, failed: 0, reused: 0, blocked: [], rejected: [], lost: null, failureSamples: [] },
        }),
      );
      // b has spent nothing of its 25: with a's 5 billed, 20 are left for a third attempt, not 25.
      expect(store.spend.committedMicros()).toBe(toMicros(30));
      expect(store.spend.grant("c", toMicros(25), cap)).toBe(toMicros(20));
    });
  });

  it("frees the grant of an attempt of an older epoch whose end another invocation hears; of this epoch's, keeps it", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`epochs-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const store = runStoreWithRun(state, "run-epochs");
      const attempts = new ExecutorAttempts({ store, live: new LiveRows(), emit: () => {}, now: Date.now, onLateWork: () => {} });
      store.spend.grant("old", toMicros(25), null);
      store.spend.grant("kept", toMicros(25), null);
      // A restarted coordinator's invocation, under epoch 1, hears the ends its predecessor's assignments left.
      store.bumpAttempt();
      attempts.open({ source: () => null, grant: async () => ({ grantedMicros: 0, spentCredits: 0, cap: null }) });
      const stopped = { kind: "stopped" as const, reason: "no invocation of its run waits for it any more" };
      // Epoch 0's attempt is assigned again by no invocation: kept, its grant held the run below its cap for good.
      attempts.apply({ ...report("old", [], stopped), invocation: "before", attemptSeq: 0 });
      // This epoch's, wound down and assigned again by this invocation: it spends under its grant now.
      attempts.apply({ ...report("kept", [], stopped), invocation: "before", attemptSeq: 1 });
      expect(store.spend.committedMicros()).toBe(toMicros(25));
    });
  });

  it("applies a report sent again (its answer lost) once, and an older one not at all, though each says the executor lives", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`again-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const store = new RunStore({ sql: createSql(state.storage), now: Date.now });
      const lines: unknown[] = [];
      const attempts = new ExecutorAttempts({
        store,
        live: new LiveRows(),
        emit: (_type, data) => void lines.push(data),
        now: Date.now,
        onLateWork: () => {},
      });
      const heard: number[] = [];
      const watch = attempts.watch("a", "m", 0, () => heard.push(1));
      const sent = (seq: number): AttemptReport => ({
        ...report("a", [bill(seq, "a")]),
        reporter: "r1",
        seq,
        logs: [{ line: `line ${seq}` }],
        usage: { rpc: 2, provider: 1, retries: 0, rateLimited: 0, lookups: 0, outcomeUnknown: 0, rpcByKind: { "sheet.persist": 2 } },
      });
      for (const seq of [1, 1, 2, 1, 2]) expect(attempts.apply(sent(seq))).toEqual({ stop: null });
      expect(lines).toEqual([{ line: "line 1" }, { line: "line 2" }]);
      expect(heard).toHaveLength(2);
      expect(store.objectRpcsByKind()).toEqual({ "sheet.persist": 4 });
      // Another reporter of the same attempt (its next invocation) counts from 1 again.
      expect(attempts.apply({ ...sent(1), reporter: "r2" })).toEqual({ stop: null });
      expect(lines).toHaveLength(3);
      watch.close();
    });
  });
});

describe("captureMap", () => {
  const source = (effects: CaptureSource["effects"]): CaptureSource =>
    ({
      runAttempt: 0,
      run: { runId: "r", org: "o", play: "p" },
      inputJson: JSON.stringify({ factor: 3 }),
      policy: {},
      effects,
      maps: [{ name: "first", total: 2, completed: 2, failed: 0, duplicatesDropped: 0, shardCount: 4 }],
      spendCapped: false,
    }) as unknown as CaptureSource;
  const play = definePlay({
    name: "p",
    description: "captures",
    input: z.object({ factor: z.number() }),
    async run(ctx, input) {
      const config = await ctx.tool<{ offset: number }>("config", {});
      const first = await ctx.map("first", [], { a: () => 1 });
      await ctx.map("second", [], { b: (row) => Number(row.n) * input.factor + config.offset + first.total });
      return null;
    },
  });

  it("replays the play's effects up to the map and hands back its fields, closures included", async () => {
    const captured = await captureMap(
      play,
      source([
        { kind: "tool", name: "config", ordinal: 0, outcome: { ok: true, value: { offset: 10 } } },
        { kind: "map", name: "first", ordinal: 0, outcome: { ok: true, value: null } },
      ]),
      "second",
      async () => [],
    );
    expect(await captured.fields.b!({ n: 2 }, {} as RowContext)).toBe(2 * 3 + 10 + 2);
  });

  it("refuses a play that fetched before the map: a response cannot be replayed", async () => {
    const fetching = definePlay({
      ...play,
      async run(ctx) {
        await ctx.fetch("https://example.com");
        await ctx.map("second", [], {});
        return null;
      },
    });
    const traced = source([{ kind: "fetch", name: "", ordinal: 0, outcome: { ok: false, code: "unreplayable", message: "no" } }]);
    await expect(captureMap(fetching, traced, "second", async () => [])).rejects.toBeInstanceOf(CaptureUnsupported);
  });

  it("hands a play that fetched before the map the response its coordinator got: status, headers and body", async () => {
    const fetching = definePlay({
      ...play,
      async run(ctx) {
        const response = await ctx.fetch("https://example.com/list", { method: "get" });
        const list = (await response.json()) as { factor: number };
        await ctx.map("second", [], {
          b: (row) => Number(row.n) * list.factor + (response.headers.get("x-offset") ? 1 : 0) + response.status,
        });
        return null;
      },
    });
    const body = new TextEncoder().encode(JSON.stringify({ factor: 7 }));
    const traced = source([
      {
        kind: "fetch",
        name: "",
        ordinal: 0,
        input: callIdentity(fetchIdentity("https://example.com/list", { method: "GET" })),
        outcome: { ok: true, value: { status: 203, statusText: "", headers: [["x-offset", "1"]], body } },
      },
    ]);
    const captured = await captureMap(fetching, traced, "second", async () => []);
    expect(await captured.fields.b!({ n: 2 }, {} as RowContext)).toBe(2 * 7 + 1 + 203);
  });

  it("hands fetches of one endpoint made at once each its own response, whichever the coordinator made first", async () => {
    const url = "https://example.com/graphql";
    const fetching = definePlay({
      ...play,
      async run(ctx) {
        const [a, b] = await Promise.all(["a", "b"].map(async (q) => (await ctx.fetch(url, { method: "POST", body: q })).text()));
        await ctx.map("second", [], { b: () => `${a}${b}` });
        return null;
      },
    });
    const answer = (ordinal: number, q: string): CaptureSource["effects"][number] => ({
      kind: "fetch",
      name: "",
      ordinal,
      input: callIdentity(fetchIdentity(url, { method: "POST", body: q })),
      outcome: { ok: true, value: { status: 200, statusText: "", headers: [], body: new TextEncoder().encode(`answer-${q};`) } },
    });
    // The coordinator's play made b's call first.
    const captured = await captureMap(fetching, source([answer(0, "b"), answer(1, "a")]), "second", async () => []);
    expect(await captured.fields.b!({}, {} as RowContext)).toBe("answer-a;answer-b;");
  });

  it("fails when the replayed play ends without reaching the map", async () => {
    const mapless = definePlay({
      ...play,
      async run(ctx) {
        await ctx.tool("config", {});
        return null;
      },
    });
    const traced = source([{ kind: "tool", name: "config", ordinal: 0, outcome: { ok: true, value: {} } }]);
    await expect(captureMap(mapless, traced, "second", async () => [])).rejects.toThrow(/without calling ctx.map\("second"\)/);
  });
});

describe("handedBack: an attempt held and not running, wound down by its coordinator", () => {
  const assignment = (over: Partial<ChunkAssignment>): ChunkAssignment => ({
    runId: "run_1",
    map: "leads",
    chunk: 2,
    attempt: { attemptId: "run_1/leads/2/0", runId: "run_1", attemptSeq: 0 },
    rows: [],
    slice: null,
    dataset: { org: "o", play: "p", dataset: "leads", shardCount: 1 },
    alongside: null,
    ...over,
  });
  const done: ChunkSummary = { completed: 3, failed: 1, reused: 0, blocked: [], rejected: [], lost: null, failureSamples: [] };

  it("hands back every row of one never started: its rows in hand, or its slice of the upload", () => {
    const rows = [7, 8, 9].map((index) => ({ key: `k${index}`, index, input: {} }));
    expect(handedBack({ assignment: assignment({ rows }), resume: null })).toEqual({
      kind: "summary",
      summary: { completed: 0, failed: 0, reused: 0, blocked: [], rejected: [], lost: null, failureSamples: [] },
      deferred: [7, 8, 9],
      unstarted: true,
    });
    const slice = { upload: "up_1", from: 100, to: 104 };
    expect(handedBack({ assignment: assignment({ slice }), resume: null })).toMatchObject({
      deferred: [100, 101, 102, 103],
      unstarted: true,
    });
  });

  it("hands back the rows a wind-down left, with what the chunk did before (here, or in the coordinator)", () => {
    // Wound down here: it ran, and its stall count (the calls it had answered counted) goes with its rows.
    const held = { rows: [5, 6], done, grantedMicros: 40, stalled: 1 };
    expect(handedBack({ assignment: assignment({}), resume: held })).toEqual({
      kind: "summary",
      summary: done,
      deferred: [5, 6],
      stalled: 1,
    });
    // Given what the coordinator's own attempt left, and never started here.
    const byCoordinator = assignment({ resume: { rows: [6], done } });
    expect(handedBack({ assignment: byCoordinator, resume: null })).toEqual({
      kind: "summary",
      summary: done,
      deferred: [6],
      unstarted: true,
    });
  });
});
