/**
 * Answers of shard claims and peeks stay under what one RPC carries (32 MiB in
 * production; workerd does not enforce it locally): past RPC_PAGE_CHARS
 * of reused receipt outputs a shard answers the first items and the client asks
 * again for the rest, and a claim of rows sends their inputs in pages. Each test
 * uses real sizes over one shard and counts the calls it took.
 */
import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ReceiptClient, receiptShardName, SheetClient } from "../src/clients/shards";
import { type AttemptRef, type PlannedRow, RPC_PAGE_CHARS } from "../src/contracts/shards";
import { SubrequestMeter } from "../src/core/meter";
import { restoreSalvage } from "../src/runtime/tools/salvage";
import { SalvageStore } from "../src/stores/salvage-store";
import { AnswerBudget } from "../src/stores/answer-budget";
import { ReceiptStore } from "../src/stores/receipt-store";
import { createSql, type Sql, type SqlValue } from "../src/stores/sql";
import { PADDED_FIND_CHARS } from "../src/tools/test-tools";
import { allEvents, datasetRows, expectedEmail, startRun, waitForRun } from "./helpers";

const LEASE_MS = 60_000;
/** Outputs of 500,000 characters: 17 of them pass RPC_PAGE_CHARS (an output holds 512 KiB at most). */
const OUTPUT_CHARS = 500_000;
const REUSED = 20;

function attemptOf(runId: string): AttemptRef {
  return { attemptId: `${runId}:a0`, runId, attemptSeq: 0 };
}

/** A distinct output of OUTPUT_CHARS characters (about) for receipt `i`. */
function outputOf(i: number) {
  return { n: i, text: `${i}:`.padEnd(OUTPUT_CHARS, String.fromCharCode(97 + (i % 26))) };
}

/** An org's receipts on one shard, the first REUSED of them completed by run `first` with outputOf(i). */
async function completedReceipts() {
  const org = `claim-size-${crypto.randomUUID()}`;
  const meter = new SubrequestMeter();
  const claimed: string[] = [];
  const receipts = new ReceiptClient({
    env,
    org,
    shardCount: 1,
    meter,
    leases: { claimed: (_shard, keys) => void claimed.push(...keys), finished: () => {} },
  });
  const keys = Array.from({ length: REUSED }, (_, i) => `r${i}`);
  const first = attemptOf("first");
  const items = keys.map((key) => ({ key, toolId: "t" }));
  await receipts.write(0, { attempt: first, complete: [], fail: [], claims: [{ leaseTtlMs: LEASE_MS, refresh: false, items }] });
  const written = await receipts.write(0, {
    attempt: first,
    complete: keys.map((key, i) => ({ key, output: outputOf(i) })),
    fail: [],
    claims: [],
  });
  expect(written.completed.accepted).toHaveLength(REUSED);
  claimed.length = 0;
  return { org, receipts, meter, keys, claimed };
}

/** `sql`, counting the characters of the strings its reads return. */
function counting(sql: Sql): { sql: Sql; read: () => number } {
  let chars = 0;
  const wrapped = (<T extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, ...values: SqlValue[]) => {
    const rows = sql<T>(strings, ...values);
    for (const row of rows) for (const value of Object.values(row)) if (typeof value === "string") chars += value.length;
    return rows;
  }) as Sql;
  wrapped.write = sql.write;
  return { sql: wrapped, read: () => chars };
}

describe("receipt answers carrying outputs", () => {
  it("a write whose claims reuse more outputs than one answer carries claims them all, in order, over more than one call", async () => {
    expect(REUSED * OUTPUT_CHARS).toBeGreaterThan(RPC_PAGE_CHARS);
    const { receipts, meter, keys, claimed } = await completedReceipts();
    const before = meter.rpcByKind["receipt.write"] ?? 0;
    const second = attemptOf("second");
    // New keys around the reused ones, one reused key asked twice, and a refresh of a reused key after them all: the
    // refresh (a second group) comes after every claim of the first, however many calls they took.
    const items = ["new-a", ...keys, "new-b", "r5"].map((key) => ({ key, toolId: "t" }));
    const result = await receipts.write(0, {
      attempt: second,
      complete: [],
      fail: [],
      claims: [
        { leaseTtlMs: LEASE_MS, refresh: false, items },
        { leaseTtlMs: LEASE_MS, refresh: true, items: [{ key: "r0", toolId: "t" }] },
      ],
    });

    expect((meter.rpcByKind["receipt.write"] ?? 0) - before).toBe(2);
    const [plain, refreshed] = result.claims;
    expect(plain!.map((claim) => [claim.key, claim.disposition])).toEqual(
      items.map((item) => [item.key, item.key.startsWith("new") ? "claimed" : "reused"]),
    );
    for (const claim of plain!) {
      if (claim.disposition !== "reused") continue;
      expect(claim.output).toEqual(outputOf(Number(claim.key.slice(1))));
      expect(claim.finishedByRun).toBe("first");
    }
    expect(refreshed).toEqual([{ key: "r0", disposition: "claimed", generation: 1 }]);
    // The attempt renews what it claimed, whichever call claimed it.
    expect(claimed.sort()).toEqual(["new-a", "new-b", "r0"]);
  });

  it("a peek of more outputs than one answer carries finds them all over more than one call", async () => {
    const { receipts, meter, keys } = await completedReceipts();
    const found = await receipts.peek([...keys, "never-claimed"]);

    expect(meter.rpcByKind["receipt.peek"]).toBe(2);
    expect(found.get("never-claimed")).toEqual({ key: "never-claimed", state: "new" });
    for (const [i, key] of keys.entries()) {
      const receipt = found.get(key);
      expect(receipt?.state).toBe("reused");
      expect(receipt?.state === "reused" && receipt.output).toEqual(outputOf(i));
    }
  });

  it("a shard reads from storage only the outputs it answers", async () => {
    const { org, keys } = await completedReceipts();
    const shard = env.RECEIPT_SHARD.getByName(receiptShardName(org, 0));
    await runInDurableObject(shard, (_instance, state) => {
      const { sql, read } = counting(createSql(state.storage));
      const store = new ReceiptStore({ sql, now: Date.now });
      // What a peek looks at first: every receipt's status, none of the outputs.
      const found = store.getMany(keys);
      expect([...found.values()].every((receipt) => receipt.status === "completed")).toBe(true);
      expect(read()).toBeLessThan(OUTPUT_CHARS);
      // A claim whose answer has room for two of the twenty outputs reads those two and the one that did not fit.
      const claims = store.claim(
        { attempt: attemptOf("reader"), leaseTtlMs: LEASE_MS, refresh: false, items: keys.map((key) => ({ key, toolId: "t" })) },
        new AnswerBudget(2 * OUTPUT_CHARS + 100),
      );
      expect(claims.map((claim) => claim.disposition)).toEqual(["reused", "reused"]);
      expect(claims.map((claim) => claim.disposition === "reused" && claim.output)).toEqual([outputOf(0), outputOf(1)]);
      expect(read()).toBeLessThan(4 * OUTPUT_CHARS);
    });
  });

  it("a write of small outputs takes one call, as before", async () => {
    const org = `claim-size-${crypto.randomUUID()}`;
    const meter = new SubrequestMeter();
    const receipts = new ReceiptClient({ env, org, shardCount: 1, meter });
    const items = Array.from({ length: 500 }, (_, i) => ({ key: `s${i}`, toolId: "t" }));
    const first = attemptOf("first");
    await receipts.write(0, { attempt: first, complete: [], fail: [], claims: [{ leaseTtlMs: LEASE_MS, refresh: false, items }] });
    await receipts.write(0, {
      attempt: first,
      complete: items.map(({ key }) => ({ key, output: { email: `${key}@example.test`, note: "x".repeat(1000) } })),
      fail: [],
      claims: [],
    });
    const result = await receipts.write(0, {
      attempt: attemptOf("second"),
      complete: [],
      fail: [],
      claims: [{ leaseTtlMs: LEASE_MS, refresh: false, items }],
    });
    expect(meter.rpcByKind["receipt.write"]).toBe(3);
    expect(result.claims[0]!.every((claim) => claim.disposition === "reused")).toBe(true);
  });
});

describe("salvage written back", () => {
  it("sends outputs of more than a call carries in more than one call, and writes each as billed", async () => {
    const org = `claim-size-${crypto.randomUUID()}`;
    const meter = new SubrequestMeter();
    const receipts = new ReceiptClient({ env, org, shardCount: 1, meter });
    const keys = Array.from({ length: REUSED }, (_, i) => `r${i}`);
    const attempt = attemptOf("salvaged");
    const items = keys.map((key) => ({ key, toolId: "t" }));
    await receipts.write(0, { attempt, complete: [], fail: [], claims: [{ leaseTtlMs: LEASE_MS, refresh: false, items }] });
    const stub = env.RUN_COORDINATOR.getByName(`claim-size-${crypto.randomUUID()}`);
    const restored = await runInDurableObject(stub, (_object, state) => {
      const salvage = new SalvageStore({ sql: createSql(state.storage) });
      for (const [i, receiptKey] of keys.entries())
        salvage.add({ receiptKey, toolId: "t", attempt, output: outputOf(i), completeAttempts: 3, error: "overloaded", at: i });
      return restoreSalvage(salvage, receipts);
    });

    expect(restored).toEqual({ pending: 0, failure: null });
    expect(meter.rpcByKind["receipt.complete"]).toBe(2);
    const found = await receipts.peek(keys);
    for (const [i, key] of keys.entries()) expect(found.get(key)).toMatchObject({ state: "reused", output: outputOf(i) });
  });
});

describe("row claims carrying large inputs", () => {
  it("go in pages, each key's rows in one page, answered as one claim would be; a rerun's claim reuses every row", async () => {
    const meter = new SubrequestMeter();
    const dataset = `claim-size-${crypto.randomUUID()}`;
    const sheets = new SheetClient({ env, meter, location: { org: "dev", play: "test-calls", dataset, shardCount: 1 } });
    // 150 inputs of 60,000 characters (a row's input holds 64 KiB): past RPC_PAGE_CHARS on the one shard.
    const rows: PlannedRow[] = Array.from({ length: 150 }, (_, index) => ({
      key: `k${index}`,
      index,
      input: { name: `k${index}`, pad: String(index % 10).repeat(60_000) },
    }));
    expect(rows.length * 60_000).toBeGreaterThan(RPC_PAGE_CHARS);
    // k7 again, last, with another input: answered blocked (by this attempt) as in one claim, not a second lease.
    const repeated: PlannedRow = { key: "k7", index: rows.length, input: { name: "k7", pad: "again" } };
    const first = attemptOf("first");
    const claims = await sheets.claimRows({ attempt: first, rows: [...rows, repeated], recompute: false, leaseTtlMs: LEASE_MS });

    expect(meter.rpcByKind["sheet.claimRows"]).toBe(2);
    expect(rows.every((row) => claims.get(row.index)?.status === "pending")).toBe(true);
    expect(claims.get(repeated.index)).toMatchObject({ status: "blocked", owner: first });

    const data = (row: PlannedRow) => ({ ...row.input, out: `computed ${row.key}` });
    const persisted = await sheets.persistRows(
      first,
      rows.map((row) => ({ key: row.key, status: "completed" as const, data: data(row), error: null })),
    );
    expect(persisted.written).toHaveLength(rows.length);
    // An estimate's look at them sends their inputs in pages too.
    expect(await sheets.peekRows(rows, false)).toEqual(new Set(rows.map((row) => row.key)));
    expect(meter.rpcByKind["sheet.peekRows"]).toBe(2);

    const rerun = attemptOf("rerun");
    const reused = await sheets.claimRows({ attempt: rerun, rows, recompute: false, leaseTtlMs: LEASE_MS });
    expect(meter.rpcByKind["sheet.claimRows"]).toBe(4);
    expect(rows.map((row) => reused.get(row.index))).toEqual(rows.map((row) => ({ key: row.key, status: "completed" })));
    const read = await sheets.readRunRows("rerun", 0, rows.length);
    expect(read.map((row) => row.data)).toEqual(rows.map(data));
  });

  it("of small inputs take one call per shard, as before", async () => {
    const meter = new SubrequestMeter();
    const dataset = `claim-size-${crypto.randomUUID()}`;
    const sheets = new SheetClient({ env, meter, location: { org: "dev", play: "test-calls", dataset, shardCount: 4 } });
    const rows: PlannedRow[] = Array.from({ length: 1000 }, (_, index) => ({ key: `k${index}`, index, input: { name: "x".repeat(1000) } }));
    const claims = await sheets.claimRows({ attempt: attemptOf("small"), rows, recompute: false, leaseTtlMs: LEASE_MS });
    expect(meter.rpcByKind["sheet.claimRows"]).toBe(4);
    expect(claims.size).toBe(rows.length);
  });
});

describe("a rerun of a map whose tool calls answered large outputs", () => {
  it("reuses every call's output, as stored, and bills nothing", { timeout: 120_000 }, async () => {
    const rows = Array.from({ length: 100 }, (_, i) => ({
      id: `padded-${i}`,
      tool: "test_padded_find",
      input: { name: `Padded Person ${i}`, domain: "padded.test" },
    }));
    // One chunk: every row claims its call at once.
    const options = { testPolicy: { chunkRows: 100 } };
    const dataset = `padded-${crypto.randomUUID()}`;
    const first = await waitForRun(await startRun("test-calls", { rows, dataset }, options), { timeoutMs: 90_000 });
    expect(first.status).toBe("completed");
    const computed = await datasetRows(first.runId, dataset);
    expect(computed).toHaveLength(rows.length);
    expect(computed.every((row) => row.out.padding.length === PADDED_FIND_CHARS)).toBe(true);

    // Computed again (force), each row's call finds its receipt: its output comes back with the claim.
    const rerun = await waitForRun(await startRun("test-calls", { rows, dataset }, { ...options, force: true }), { timeoutMs: 90_000 });
    expect(rerun.status).toBe("completed");
    expect(rerun.usage.providerRequests).toBe(0);
    expect(rerun.usage.spend.total).toBe(0);
    expect(await datasetRows(rerun.runId, dataset)).toEqual(computed);
    // More outputs than one answer carries came back: in more calls than one per shard.
    const outputChars = rows.length * PADDED_FIND_CHARS;
    expect(rerun.usage.objectRpcsByKind["receipt.write"]).toBeGreaterThanOrEqual(Math.ceil(outputChars / RPC_PAGE_CHARS));
  });
});

describe("a run whose play's source passes what one call carries", () => {
  // 300 rows of a CSV whose header names a 60,000-character column: about 18 MB of rows parsed, and one name past
  // Latin-1 doubles it in memory (36 MB: an executor's source would pass 32 MiB). The CSV itself is 66 KB.
  const wide = "c".repeat(60_000);
  const names = Array.from({ length: 300 }, (_, i) => `${i === 7 ? "\u4e00" : ""}Wide ${i}`);
  const csv = `name,domain,${wide}\n${names.map((name) => `${name},wide.test,v`).join("\n")}\n`;

  /** Runs the CSV to completion (every row, the right emails); answers the run and its log lines. */
  async function runWide(testPolicy?: Record<string, number>) {
    const runId = await startRun("test-keyed-rows", { csv }, testPolicy ? { testPolicy } : {});
    const run = await waitForRun(runId, { timeoutMs: 120_000 });
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toEqual({ total: 300, completed: 300, failed: 0 });
    const stored = await datasetRows(runId, "items");
    expect(stored.map((row) => row.email).sort()).toEqual(names.map((name) => expectedEmail(name, "wide.test")).sort());
    const lines = (await allEvents(runId)).flatMap((e) => (e.type === "log.appended" ? [e.line] : []));
    return { run, lines };
  }

  it("runs its map in the coordinator from the start: every row completes, no executor asked for the source", async () => {
    const { run, lines } = await runWide();
    expect(
      lines.some((line) => line.includes("runs in the coordinator for the rest of this invocation") && line.includes("too large")),
    ).toBe(true);
    // Known before any executor was given an attempt: none asked for the source the platform would refuse to carry.
    expect(run.usage.objectRpcsByKind["executor.assign"] ?? 0).toBe(0);
    expect(run.usage.objectRpcsByKind["run.captureSource"] ?? 0).toBe(0);
  }, 150_000);

  it("weighed short of what the platform carries, runs its map in the coordinator once an executor is refused it", async () => {
    // The weighing told to let it through (as an estimate short of the platform's serialization would): an executor
    // asks for the source, the platform refuses to carry it, and the map goes on where the source is.
    const { run, lines } = await runWide({ sourceBudgetBytes: 2 ** 30 });
    expect(
      lines.some((line) => line.includes("runs in the coordinator for the rest of this invocation") && line.includes("Serialized RPC")),
    ).toBe(true);
    expect(run.usage.objectRpcsByKind["executor.assign"]).toBeGreaterThan(0);
    expect(run.usage.objectRpcsByKind["run.captureSource"]).toBeGreaterThan(0);
  }, 150_000);
});
