import { codeOf } from "../src/core/errors";
import { env } from "cloudflare:workers";
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { SheetShard } from "../src/actors/SheetShard";
import type { AttemptRef } from "../src/contracts/shards";

const LONG_TTL_MS = 60_000;
const SHORT_TTL_MS = 20;

function shard() {
  return env.SHEET_SHARD.getByName("t-" + crypto.randomUUID());
}
type Shard = ReturnType<typeof shard>;

function attempt(runId: string, attemptSeq = 0): AttemptRef {
  return { attemptId: `${runId}#${attemptSeq}`, runId, attemptSeq };
}

function claim(
  stub: Shard,
  by: AttemptRef,
  keys: string[],
  options: { leaseTtlMs?: number; recompute?: boolean; firstIndex?: number; reuseOnly?: boolean } = {},
) {
  return stub.claimRows({
    attempt: by,
    leaseTtlMs: options.leaseTtlMs ?? LONG_TTL_MS,
    recompute: options.recompute ?? false,
    reuseOnly: options.reuseOnly,
    rows: keys.map((key, i) => ({ key, index: (options.firstIndex ?? 0) + i, input: { name: key } })),
  });
}

function complete(
  stub: Shard,
  by: AttemptRef,
  keys: string[],
  data: (key: string) => Record<string, unknown> = (key) => ({ name: key, by: by.attemptId }),
) {
  return stub.persistRows({ attempt: by, rows: keys.map((key) => ({ key, status: "completed" as const, data: data(key), error: null })) });
}

async function readAll(stub: Shard, runId: string) {
  return (await stub.readRunRows({ runId, fromIndex: 0, toIndex: 1000 })).rows;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The shard's scheduled alarm (epoch ms), or null. */
function alarmOf(stub: Shard) {
  return runInDurableObject(stub, (_o, state) => state.storage.getAlarm());
}

/**
 * Claims with a short lease and cancels the alarm in the same event (no alarm
 * can run in between), as if its delivery were late: the lease then expires
 * without being freed.
 */
function claimWithLateAlarm(stub: Shard, by: AttemptRef, keys: string[]) {
  return runInDurableObject(stub, async (instance: SheetShard, state) => {
    const rows = keys.map((key, index) => ({ key, index, input: { name: key } }));
    await instance.claimRows({ attempt: by, leaseTtlMs: SHORT_TTL_MS, recompute: false, rows });
    await state.storage.deleteAlarm();
  });
}

/**
 * Calls an RPC method on the instance inside the object and returns the
 * message it rejects with. A rejection through a stub leaks an unhandled
 * rejection under vitest-pool-workers (cloudflare/workers-sdk#14736).
 */
function rejectionOf(stub: Shard, call: (shard: SheetShard) => Promise<unknown>) {
  return runInDurableObject(stub, (instance: SheetShard) =>
    call(instance).then(
      () => "resolved",
      (error: unknown) => `${codeOf(error) ?? "(no code)"}: ${error instanceof Error ? error.message : String(error)}`,
    ),
  );
}

describe("claim and persist", () => {
  it("claims a new row as pending, stores its input, and completes it on persist", async () => {
    const stub = shard();
    const a = attempt("run-a");
    expect((await claim(stub, a, ["k1"])).rows).toEqual([{ key: "k1", status: "pending" }]);
    expect(await readAll(stub, "run-a")).toEqual([{ index: 0, key: "k1", status: "pending", data: { name: "k1" }, error: null }]);

    const data = { name: "k1", email: "é@x.io", score: 0.1, nested: { list: [1, "two", null] } };
    expect(await complete(stub, a, ["k1"], () => data)).toEqual({ written: ["k1"], rejected: [] });
    expect(await readAll(stub, "run-a")).toEqual([{ index: 0, key: "k1", status: "completed", data, error: null }]);
    expect(await stub.countRunRows({ runId: "run-a" })).toEqual({ total: 1, completed: 1, failed: 0, pending: 0 });
  });

  it("reuses a row completed by another run, with its data, and takes no lease", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1", "k2"]);
    await complete(stub, a, ["k1"], () => ({ email: "a@x.io" }));

    const b = attempt("run-b");
    expect((await claim(stub, b, ["k1", "k2"])).rows).toEqual([
      { key: "k1", status: "completed" },
      { key: "k2", status: "blocked", owner: a, leaseExpiresAt: expect.any(Number) },
    ]);
    // Reuse took no lease: a third run reuses it too, and its view holds the row's data.
    expect((await claim(stub, attempt("run-c"), ["k1"])).rows).toEqual([{ key: "k1", status: "completed" }]);
    expect(await readAll(stub, "run-c")).toEqual([{ index: 0, key: "k1", status: "completed", data: { email: "a@x.io" }, error: null }]);
    expect(await stub.countRunRows({ runId: "run-b" })).toEqual({ total: 2, completed: 1, failed: 0, pending: 1 });
  });

  it("records only reused rows under reuseOnly: the others are answered but neither leased, versioned nor in the run's view", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["done", "leased"]);
    await complete(stub, a, ["done"], () => ({ email: "a@x.io" }));

    const b = attempt("run-b");
    expect((await claim(stub, b, ["done", "leased", "new"], { reuseOnly: true })).rows).toEqual([
      { key: "done", status: "completed" },
      { key: "leased", status: "blocked", owner: a, leaseExpiresAt: expect.any(Number) },
      { key: "new", status: "pending" },
    ]);
    // The sweep's run sees its reused row, and nothing of the rows it left.
    expect(await readAll(stub, "run-b")).toEqual([{ index: 0, key: "done", status: "completed", data: { email: "a@x.io" }, error: null }]);
    expect(await stub.countRunRows({ runId: "run-b" })).toEqual({ total: 1, completed: 1, failed: 0, pending: 0 });
    // "new" got no lease and no version: another run claims it as pending at once, in its first version.
    const c = attempt("run-c");
    expect((await claim(stub, c, ["new"])).rows).toEqual([{ key: "new", status: "pending" }]);
    expect(
      await runInDurableObject(stub, (_o, state) => state.storage.sql.exec("SELECT version FROM row_versions WHERE key = 'new'").toArray()),
    ).toEqual([{ version: 1 }]);
    // And "leased" is still run-a's: its write lands.
    expect(await complete(stub, a, ["leased"])).toEqual({ written: ["leased"], rejected: [] });
  });

  it("re-executes a failed row in a new version, leaving the failed run's view as it ended", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1"]);
    await stub.persistRows({ attempt: a, rows: [{ key: "k1", status: "failed", data: { name: "k1" }, error: "provider said no" }] });
    expect(await stub.countRunRows({ runId: "run-a" })).toEqual({ total: 1, completed: 0, failed: 1, pending: 0 });

    const b = attempt("run-b");
    expect((await claim(stub, b, ["k1"])).rows).toEqual([{ key: "k1", status: "pending" }]);
    expect(await readAll(stub, "run-b")).toEqual([{ index: 0, key: "k1", status: "pending", data: { name: "k1" }, error: null }]);

    await complete(stub, b, ["k1"], () => ({ ok: true }));
    expect(await readAll(stub, "run-b")).toEqual([{ index: 0, key: "k1", status: "completed", data: { ok: true }, error: null }]);
    // The first run's view keeps the failure it ended with.
    expect(await readAll(stub, "run-a")).toEqual([
      { index: 0, key: "k1", status: "failed", data: { name: "k1" }, error: "provider said no" },
    ]);
  });

  it("reuses a completed row only for the same input (in any key order); a changed input is a new version", async () => {
    const stub = shard();
    const a = attempt("run-a");
    const rows = (input: Record<string, unknown>) => [{ key: "cust-17", index: 0, input }];
    await stub.claimRows({ attempt: a, leaseTtlMs: LONG_TTL_MS, recompute: false, rows: rows({ id: "cust-17", domain: "old-typo.com" }) });
    await complete(stub, a, ["cust-17"], () => ({ id: "cust-17", domain: "old-typo.com", email: "ann@old-typo.com" }));

    const same = await stub.claimRows({
      attempt: attempt("run-b"),
      leaseTtlMs: LONG_TTL_MS,
      recompute: false,
      rows: rows({ domain: "old-typo.com", id: "cust-17" }),
    });
    expect(same.rows).toEqual([{ key: "cust-17", status: "completed" }]);
    expect((await readAll(stub, "run-b"))[0]?.data).toEqual({ id: "cust-17", domain: "old-typo.com", email: "ann@old-typo.com" });

    const c = attempt("run-c");
    const changed = await stub.claimRows({
      attempt: c,
      leaseTtlMs: LONG_TTL_MS,
      recompute: false,
      rows: rows({ id: "cust-17", domain: "fixed.com" }),
    });
    expect(changed.rows).toEqual([{ key: "cust-17", status: "pending" }]);
    await complete(stub, c, ["cust-17"], () => ({ id: "cust-17", domain: "fixed.com", email: "ann@fixed.com" }));
    // Each run's view holds the version it computed or reused.
    expect((await readAll(stub, "run-a"))[0]!.data).toEqual({ id: "cust-17", domain: "old-typo.com", email: "ann@old-typo.com" });
    expect((await readAll(stub, "run-b"))[0]!.data).toEqual({ id: "cust-17", domain: "old-typo.com", email: "ann@old-typo.com" });
    expect((await readAll(stub, "run-c"))[0]!.data).toEqual({ id: "cust-17", domain: "fixed.com", email: "ann@fixed.com" });
  });

  it("claims a key repeated in one chunk with another input once the first occurrence is written: each keeps its own output", async () => {
    const stub = shard();
    const a = attempt("run-dup");
    const rows = [
      { key: "cust-9", index: 10, input: { id: "cust-9", domain: "first.com" } },
      { key: "cust-9", index: 11, input: { id: "cust-9", domain: "second.com" } },
    ];
    const claimRows = () => stub.claimRows({ attempt: a, leaseTtlMs: LONG_TTL_MS, recompute: false, rows });
    const first = await claimRows();
    expect(first.rows.map((r) => r.status)).toEqual(["pending", "blocked"]);
    await complete(stub, a, ["cust-9"], () => ({ id: "cust-9", domain: "first.com", email: "x@first.com" }));
    // The chunk claimed again: the first is done, the second gets a version of its own.
    const again = await claimRows();
    expect(again.rows.map((r) => r.status)).toEqual(["completed", "pending"]);
    await complete(stub, a, ["cust-9"], () => ({ id: "cust-9", domain: "second.com", email: "x@second.com" }));
    const view = await readAll(stub, "run-dup");
    expect(view.map((r) => r.data)).toEqual([
      { id: "cust-9", domain: "first.com", email: "x@first.com" },
      { id: "cust-9", domain: "second.com", email: "x@second.com" },
    ]);
    expect(view.map((r) => r.status)).toEqual(["completed", "completed"]);
  });

  it("never changes a finished run's view: force recomputes into a new version, and a pending row of an ended run stays its own", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1", "k2"]);
    await complete(stub, a, ["k1"], () => ({ name: "k1", v: "a" }));
    await stub.releaseRun({ runId: "run-a" }); // run-a ends (cancelled) with k2 pending

    const f = attempt("run-forced");
    expect((await claim(stub, f, ["k1", "k2"], { recompute: true })).rows).toEqual([
      { key: "k1", status: "pending" },
      { key: "k2", status: "pending" },
    ]);
    await complete(stub, f, ["k1", "k2"], (key) => ({ name: key, v: "forced" }));
    expect(await readAll(stub, "run-a")).toEqual([
      { index: 0, key: "k1", status: "completed", data: { name: "k1", v: "a" }, error: null },
      { index: 1, key: "k2", status: "pending", data: { name: "k2" }, error: null },
    ]);
    expect((await readAll(stub, "run-forced")).map((r) => r.data.v)).toEqual(["forced", "forced"]);
  });

  it("treats a repeated persist by the same attempt as written and changes nothing", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1"]);
    expect(await complete(stub, a, ["k1"], () => ({ v: 1 }))).toEqual({ written: ["k1"], rejected: [] });
    expect(await complete(stub, a, ["k1"], () => ({ v: 1 }))).toEqual({ written: ["k1"], rejected: [] });
    expect(await complete(stub, a, ["k1"], () => ({ v: 2 }))).toEqual({ written: ["k1"], rejected: [] });
    expect((await readAll(stub, "run-a"))[0]!.data).toEqual({ v: 1 });
    // A row it never claimed is rejected.
    expect(await complete(stub, a, ["unknown"])).toEqual({ written: [], rejected: ["unknown"] });
    // Once another attempt has leased the row, a late repeat is rejected.
    await claim(stub, attempt("run-b"), ["k1"], { recompute: true });
    expect(await complete(stub, a, ["k1"], () => ({ v: 1 }))).toEqual({ written: [], rejected: ["k1"] });
  });

  it("recomputes rows completed by another run but reuses its own when recompute is set", async () => {
    const stub = shard();
    const old = attempt("run-old");
    await claim(stub, old, ["k1"]);
    await complete(stub, old, ["k1"]);
    const mine = attempt("run-new");
    await claim(stub, mine, ["k2"], { firstIndex: 1 });
    await complete(stub, mine, ["k2"], () => ({ mine: true }));

    const retry = attempt("run-new", 1);
    expect((await claim(stub, retry, ["k1", "k2"], { recompute: true })).rows).toEqual([
      { key: "k1", status: "pending" },
      { key: "k2", status: "completed", own: true },
    ]);
    // While the recompute runs, the row is leased: other runs are blocked, not served stale data.
    expect((await claim(stub, attempt("run-third"), ["k1"])).rows).toEqual([
      { key: "k1", status: "blocked", owner: retry, leaseExpiresAt: expect.any(Number) },
    ]);
  });
});

describe("leases and fencing", () => {
  it("blocks a row leased by a live attempt of another run until its lease expires and the alarm frees it", async () => {
    const stub = shard();
    const a = attempt("run-a");
    const before = Date.now();
    await claim(stub, a, ["k1"]);

    const b = attempt("run-b");
    const [blocked] = (await claim(stub, b, ["k1"])).rows;
    expect(blocked).toMatchObject({ key: "k1", status: "blocked", owner: a });
    if (blocked?.status !== "blocked") throw new Error("expected blocked");
    expect(blocked.leaseExpiresAt).toBeGreaterThanOrEqual(before + LONG_TTL_MS);
    expect(await alarmOf(stub)).toBe(blocked.leaseExpiresAt);

    // Shorten the lease (a renewal sets it to now + ttl), then let it lapse.
    await stub.renewLeases({ attempt: a, keys: ["k1"], leaseTtlMs: SHORT_TTL_MS });
    await sleep(SHORT_TTL_MS * 2);
    // Miniflare fires due alarms by itself; run it here in case it has not yet.
    await runDurableObjectAlarm(stub);
    expect(await alarmOf(stub)).toBeNull();
    // The alarm freed the lease: the old attempt no longer owns the row.
    expect(await complete(stub, a, ["k1"])).toEqual({ written: [], rejected: ["k1"] });
    expect((await claim(stub, b, ["k1"])).rows).toEqual([{ key: "k1", status: "pending" }]);
  });

  it("rejects a write from an attempt that lost its lease and keeps the newer attempt's data", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claimWithLateAlarm(stub, a, ["k1"]);
    await sleep(SHORT_TTL_MS * 2);
    // An expired lease is free to another run even before the alarm runs.
    const b = attempt("run-b");
    expect((await claim(stub, b, ["k1"])).rows).toEqual([{ key: "k1", status: "pending" }]);

    expect(await complete(stub, a, ["k1"], () => ({ by: "stale" }))).toEqual({ written: [], rejected: ["k1"] });
    expect(await complete(stub, b, ["k1"], () => ({ by: "b" }))).toEqual({ written: ["k1"], rejected: [] });
    expect(await complete(stub, a, ["k1"], () => ({ by: "stale" }))).toEqual({ written: [], rejected: ["k1"] });
    expect((await readAll(stub, "run-b"))[0]).toMatchObject({ status: "completed", data: { by: "b" } });
  });

  it("accepts a write under an expired lease nobody else has taken", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claimWithLateAlarm(stub, a, ["k1"]);
    await sleep(SHORT_TTL_MS * 2);
    expect(await complete(stub, a, ["k1"])).toEqual({ written: ["k1"], rejected: [] });
  });

  it("lets a newer attempt of the same run take over a live lease and fences the old one", async () => {
    const stub = shard();
    const old = attempt("run-a", 0);
    const newer = attempt("run-a", 1);
    await claim(stub, old, ["k1"]);
    expect((await claim(stub, old, ["k1"])).rows).toEqual([{ key: "k1", status: "pending" }]);
    expect((await claim(stub, newer, ["k1"])).rows).toEqual([{ key: "k1", status: "pending" }]);
    expect((await claim(stub, old, ["k1"])).rows).toEqual([{ key: "k1", status: "fenced", newerSeq: 1 }]);

    expect(await complete(stub, old, ["k1"], () => ({ by: "old" }))).toEqual({ written: [], rejected: ["k1"] });
    expect(await complete(stub, newer, ["k1"], () => ({ by: "newer" }))).toEqual({ written: ["k1"], rejected: [] });
    expect((await readAll(stub, "run-a"))[0]).toMatchObject({ status: "completed", data: { by: "newer" } });
  });

  it("refuses every claim of an older epoch of a run once a newer one claimed here: a row the newer epoch failed is not run again", async () => {
    const stub = shard();
    const old = attempt("run-a", 0);
    const newer = attempt("run-a", 1);
    await claim(stub, old, ["k1", "k2"]);
    // The coordinator gave epoch 0 up: epoch 1 claims the chunk again, fails one row and completes the other.
    await claim(stub, newer, ["k1", "k2"]);
    await stub.persistRows({ attempt: newer, rows: [{ key: "k1", status: "failed", data: { name: "k1" }, error: "provider said no" }] });
    await complete(stub, newer, ["k2"], () => ({ by: "newer" }));
    const view = await readAll(stub, "run-a");
    const versions = () =>
      runInDurableObject(stub, (_o, state) =>
        state.storage.sql.exec("SELECT key, version, status FROM row_versions ORDER BY key").toArray(),
      );
    const before = await versions();

    // An attempt of epoch 0 its executor held unstarted starts late, on these rows and a row nobody claimed yet.
    expect((await claim(stub, old, ["k1", "k2", "k3"])).rows).toEqual([
      { key: "k1", status: "fenced", newerSeq: 1 },
      { key: "k2", status: "fenced", newerSeq: 1 },
      { key: "k3", status: "fenced", newerSeq: 1 },
    ]);
    // Nothing was leased, versioned or recorded: the failed row is not computed again, the run's view is as epoch 1 left it.
    expect(await versions()).toEqual(before);
    expect(await readAll(stub, "run-a")).toEqual(view);
    expect((await claim(stub, attempt("run-b"), ["k3"])).rows).toEqual([{ key: "k3", status: "pending" }]);
    // Another run claims as before; a later epoch of this one finds the rows settled in the run's view as epoch 1 left
    // them (a failed row is not computed again), and a row another run leases blocked.
    expect((await claim(stub, attempt("run-a", 2), ["k1", "k2", "k3"])).rows).toEqual([
      { key: "k1", status: "failed", error: "provider said no" },
      { key: "k2", status: "completed", own: true },
      { key: "k3", status: "blocked", owner: attempt("run-b"), leaseExpiresAt: expect.any(Number) },
    ]);
  });

  it("answers a chunk claimed again with the rows the run completed, though another run has since leased one with another input", async () => {
    const stub = shard();
    const a = attempt("run-a");
    const b = attempt("run-b");
    // Run b holds k2; run a completes k1 and is blocked on k2.
    await claim(stub, b, ["k2"]);
    expect((await claim(stub, a, ["k1", "k2"])).rows.map((row) => row.status)).toEqual(["pending", "blocked"]);
    await complete(stub, a, ["k1"], () => ({ name: "k1", by: "a" }));
    // Run b leases k1 for another input, then writes it.
    const changed = {
      attempt: b,
      leaseTtlMs: LONG_TTL_MS,
      recompute: false,
      rows: [{ key: "k1", index: 5, input: { name: "k1", more: 1 } }],
    };
    expect((await stub.claimRows(changed)).rows).toEqual([{ key: "k1", status: "pending" }]);
    // Run a's chunk, claimed again, keeps the k1 it completed: not blocked by b's lease, not computed again after b's write.
    expect((await claim(stub, attempt("run-a", 1), ["k1"])).rows).toEqual([{ key: "k1", status: "completed", own: true }]);
    await stub.persistRows({ attempt: b, rows: [{ key: "k1", status: "completed", data: { name: "k1", more: 1, by: "b" }, error: null }] });
    expect((await claim(stub, attempt("run-a", 1), ["k1"])).rows).toEqual([{ key: "k1", status: "completed", own: true }]);
    expect((await readAll(stub, "run-a"))[0]).toMatchObject({ key: "k1", status: "completed", data: { name: "k1", by: "a" } });
  });

  it("answers a row settled in the run's view so only for the same key and input at its index", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1"]);
    await complete(stub, a, ["k1"]);
    expect((await claim(stub, attempt("run-a", 1), ["k1"])).rows).toEqual([{ key: "k1", status: "completed", own: true }]);
    // Another key at index 0 (a play that did not replay its rows alike), or the same key with another input: computed.
    expect((await claim(stub, attempt("run-a", 2), ["k9"])).rows).toEqual([{ key: "k9", status: "pending" }]);
    const changed = {
      attempt: attempt("run-a", 3),
      leaseTtlMs: LONG_TTL_MS,
      recompute: false,
      rows: [{ key: "k1", index: 0, input: { name: "k1", more: 1 } }],
    };
    expect((await stub.claimRows(changed)).rows).toEqual([{ key: "k1", status: "pending" }]);
  });

  it("fences a run's epochs before the one a release names: a cancelled run's stale attempt cannot lease its rows again", async () => {
    const stub = shard();
    await claim(stub, attempt("run-a", 3), ["k1"]);
    // Parked: epoch 4 begins, and the release refuses epoch 3 from now on; epoch 4 and later claim as before.
    await stub.releaseRun({ runId: "run-a", fenceBelow: 4 });
    expect((await claim(stub, attempt("run-a", 3), ["k1"])).rows).toEqual([{ key: "k1", status: "fenced", newerSeq: 4 }]);
    expect((await claim(stub, attempt("run-a", 4), ["k1"])).rows).toEqual([{ key: "k1", status: "pending" }]);
    // Cancelled in epoch 5: no epoch of the run claims again; a release never lowers the fence.
    await stub.releaseRun({ runId: "run-a", fenceBelow: 6 });
    await stub.releaseRun({ runId: "run-a", fenceBelow: 2 });
    expect((await claim(stub, attempt("run-a", 5), ["k1", "k2"])).rows).toEqual([
      { key: "k1", status: "fenced", newerSeq: 6 },
      { key: "k2", status: "fenced", newerSeq: 6 },
    ]);
    // Its rows are free for the next run at once.
    expect((await claim(stub, attempt("run-b"), ["k1", "k2"])).rows.map((r) => r.status)).toEqual(["pending", "pending"]);
  });

  it("renews only the leases the attempt holds", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1", "k2"]);
    expect(await stub.renewLeases({ attempt: a, keys: ["k2"], leaseTtlMs: SHORT_TTL_MS })).toEqual({ renewed: ["k2"], lost: [] });
    expect(await stub.renewLeases({ attempt: a, keys: ["k1", "nope"], leaseTtlMs: LONG_TTL_MS })).toEqual({
      renewed: ["k1"],
      lost: ["nope"],
    });
    expect(await stub.renewLeases({ attempt: attempt("run-b"), keys: ["k1"], leaseTtlMs: LONG_TTL_MS })).toEqual({
      renewed: [],
      lost: ["k1"],
    });

    await sleep(SHORT_TTL_MS * 2);
    // Whether miniflare fired it already or it runs now, the alarm re-armed for k1's lease.
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await alarmOf(stub)).toBeGreaterThan(Date.now() + LONG_TTL_MS / 2);
    const b = attempt("run-b");
    expect((await claim(stub, b, ["k1", "k2"])).rows).toEqual([
      { key: "k1", status: "blocked", owner: a, leaseExpiresAt: expect.any(Number) },
      { key: "k2", status: "pending" },
    ]);
  });

  it("releases a run's leases so that another run can claim at once", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1", "k2"]);
    await complete(stub, a, ["k2"]);
    expect(await stub.releaseRun({ runId: "run-a" })).toEqual({ released: 1 });
    // No lease left to expire: the alarm is gone.
    expect(await alarmOf(stub)).toBeNull();
    expect(await stub.releaseRun({ runId: "run-a" })).toEqual({ released: 0 });
    expect((await claim(stub, attempt("run-b"), ["k1"])).rows).toEqual([{ key: "k1", status: "pending" }]);
    expect(await complete(stub, a, ["k1"])).toEqual({ written: [], rejected: ["k1"] });
  });

  it("runs the alarm idempotently: an early delivery frees nothing and re-arms", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1"]);
    const [blocked] = (await claim(stub, attempt("run-b"), ["k1"])).rows;
    if (blocked?.status !== "blocked") throw new Error("expected blocked");
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await alarmOf(stub)).toBe(blocked.leaseExpiresAt);
    expect((await claim(stub, attempt("run-b"), ["k1"])).rows).toEqual([blocked]);

    await stub.releaseRun({ runId: "run-a" });
    expect(await runDurableObjectAlarm(stub)).toBe(false);
  });

  it("deletes the alarm once every lease has expired", async () => {
    const stub = shard();
    await claim(stub, attempt("run-a"), ["k1", "k2"], { leaseTtlMs: SHORT_TTL_MS });
    await sleep(SHORT_TTL_MS * 2);
    await runDurableObjectAlarm(stub);
    expect(await alarmOf(stub)).toBeNull();
    expect(await runDurableObjectAlarm(stub)).toBe(false);
    expect((await claim(stub, attempt("run-b"), ["k1", "k2"])).rows.map((r) => r.status)).toEqual(["pending", "pending"]);
  });
});

describe("a run's view", () => {
  it("reads only the run's rows, in input order", async () => {
    const stub = shard();
    const a = attempt("run-a");
    const b = attempt("run-b");
    await stub.claimRows({
      attempt: a,
      leaseTtlMs: LONG_TTL_MS,
      recompute: false,
      rows: [
        { key: "a2", index: 2, input: { n: 2 } },
        { key: "shared", index: 0, input: { n: 0 } },
        { key: "a1", index: 1, input: { n: 1 } },
      ],
    });
    await complete(stub, a, ["a2", "shared", "a1"]);
    await stub.claimRows({
      attempt: b,
      leaseTtlMs: LONG_TTL_MS,
      recompute: false,
      rows: [
        { key: "b0", index: 0, input: { n: 0 } },
        { key: "shared", index: 5, input: { n: 0 } },
      ],
    });

    expect((await readAll(stub, "run-a")).map((r) => [r.index, r.key])).toEqual([
      [0, "shared"],
      [1, "a1"],
      [2, "a2"],
    ]);
    expect((await readAll(stub, "run-b")).map((r) => [r.index, r.key, r.status])).toEqual([
      [0, "b0", "pending"],
      [5, "shared", "completed"],
    ]);
    expect((await stub.readRunRows({ runId: "run-a", fromIndex: 1, toIndex: 2 })).rows.map((r) => r.key)).toEqual(["a1"]);
    expect((await stub.readRunRows({ runId: "run-a", fromIndex: 3, toIndex: 1 })).rows).toEqual([]);
    expect(await stub.countRunRows({ runId: "run-b" })).toEqual({ total: 2, completed: 1, failed: 0, pending: 1 });
  });

  it("answers a read no larger than its size budget, one row at least, and says when the budget cut it short", async () => {
    const stub = shard();
    const a = attempt("run-a");
    const keys = ["r0", "r1", "r2", "r3"];
    await claim(stub, a, keys);
    await complete(stub, a, keys, () => ({ text: "x".repeat(1000) }));
    const read = (maxChars?: number, limit?: number) =>
      stub.readRunRows({ runId: "run-a", fromIndex: 0, toIndex: 10, maxChars, limit }).then((r) => [r.rows.length, r.cut]);
    expect(await read(2500)).toEqual([2, true]);
    expect(await read(1)).toEqual([1, true]);
    expect(await read()).toEqual([4, false]);
    // The limit, or the range's end, ending it first is not a cut.
    expect(await read(2500, 2)).toEqual([2, false]);
    expect(await read(1_000_000, 3)).toEqual([3, false]);
  });

  it("claims, persists and reads 500 rows of 2 KB in one call each", async () => {
    const stub = shard();
    // 500 rows and about 1 MB per call: far past 100 bound parameters and one JSON parameter's budget.
    const pad = "x".repeat(2000);
    const keys = Array.from({ length: 500 }, (_, i) => `row-${i}`);
    const a = attempt("run-a");
    const claimed = await stub.claimRows({
      attempt: a,
      leaseTtlMs: LONG_TTL_MS,
      recompute: false,
      rows: keys.map((key, index) => ({ key, index, input: { name: key, pad } })),
    });
    expect(claimed.rows.map((r) => r.key)).toEqual(keys);
    expect(claimed.rows.every((r) => r.status === "pending")).toBe(true);
    expect((await complete(stub, a, keys, (key) => ({ name: key, out: pad }))).written).toEqual(keys);

    const rows = await readAll(stub, "run-a");
    expect(rows.map((r) => r.key)).toEqual(keys);
    expect(rows[499]).toEqual({ index: 499, key: "row-499", status: "completed", data: { name: "row-499", out: pad }, error: null });
    const reused = (
      await stub.claimRows({
        attempt: attempt("run-b"),
        leaseTtlMs: LONG_TTL_MS,
        recompute: false,
        rows: keys.map((key, index) => ({ key, index, input: { name: key, pad } })),
      })
    ).rows;
    expect(reused.filter((r) => r.status === "completed")).toHaveLength(500);
    expect(await stub.countRunRows({ runId: "run-b" })).toEqual({ total: 500, completed: 500, failed: 0, pending: 0 });
    const renewed = await stub.renewLeases({ attempt: a, keys, leaseTtlMs: LONG_TTL_MS });
    expect(renewed.lost).toEqual(keys);
  });

  it("keeps rows, leases and the alarm across eviction", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1", "k2"]);
    await complete(stub, a, ["k1"], () => ({ kept: true }));
    await evictDurableObject(stub);

    expect((await readAll(stub, "run-a")).map((r) => [r.key, r.status, r.data])).toEqual([
      ["k1", "completed", { kept: true }],
      ["k2", "pending", { name: "k2" }],
    ]);
    expect((await claim(stub, attempt("run-b"), ["k2"])).rows[0]).toMatchObject({ status: "blocked", owner: a });
    expect(await complete(stub, a, ["k2"])).toEqual({ written: ["k2"], rejected: [] });
  });
});

describe("dataset and validation", () => {
  it("records the shard count once: the first writer wins", async () => {
    const stub = shard();
    expect(await stub.ensureDataset({ shardCount: 4 })).toEqual({ shardCount: 4 });
    expect(await stub.ensureDataset({ shardCount: 8 })).toEqual({ shardCount: 4 });
    await evictDurableObject(stub);
    expect(await stub.ensureDataset({ shardCount: 16 })).toEqual({ shardCount: 4 });
  });

  it("rejects malformed requests with an invalid_request code", async () => {
    const stub = shard();
    expect(await rejectionOf(stub, (o) => o.ensureDataset({ shardCount: 0 }))).toMatch(/^invalid_request: shardCount/);
    expect(await rejectionOf(stub, (o) => o.ensureDataset({ shardCount: 257 }))).toMatch(/^invalid_request: /);
    const badAttempt = { attemptId: "", runId: "r", attemptSeq: 0 };
    expect(await rejectionOf(stub, (o) => o.claimRows({ attempt: badAttempt, leaseTtlMs: 1000, recompute: false, rows: [] }))).toMatch(
      /^invalid_request: attempt.attemptId/,
    );
    const notAnObject = { key: "k", index: 0, input: "not an object" };
    expect(
      await rejectionOf(stub, (o) => o.claimRows({ attempt: attempt("r"), leaseTtlMs: 1000, recompute: false, rows: [notAnObject] })),
    ).toMatch(/^invalid_request: row "k"/);
    // Nothing was recorded by the rejected claims.
    expect(await stub.countRunRows({ runId: "r" })).toEqual({ total: 0, completed: 0, failed: 0, pending: 0 });
  });

  it("refuses row data over 1 MiB and writes nothing of that request", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1", "k2"]);
    const huge = { blob: "é".repeat(600 * 1024) };
    const rows = ["k1", "k2"].map((key) => ({ key, status: "completed" as const, data: key === "k2" ? huge : { ok: true }, error: null }));
    expect(await rejectionOf(stub, (o) => o.persistRows({ attempt: a, rows }))).toMatch(/^invalid_request: row "k2": data is over/);
    expect((await readAll(stub, "run-a")).map((r) => r.status)).toEqual(["pending", "pending"]);
  });
});
