import { codeOf } from "../src/core/errors";
import { env } from "cloudflare:workers";
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { AttemptRef } from "../src/contracts/shards";
import type { ReceiptShard } from "../src/actors/ReceiptShard";
import { OUTCOME_UNKNOWN } from "../src/stores/receipt-rules";

const LONG_LEASE_MS = 60_000;

function shard() {
  return env.RECEIPT_SHARD.getByName(`t-${crypto.randomUUID()}`);
}
type Shard = ReturnType<typeof shard>;

function attempt(runId: string, attemptSeq = 0, attemptId = `${runId}:a${attemptSeq}`): AttemptRef {
  return { attemptId, runId, attemptSeq };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A lease short enough to expire during a test (its own alarm held back by thenPostpone). */
const SHORT_LEASE_MS = 100;
const PAST_SHORT_LEASE_MS = 150;

/**
 * Alarms fire on their own under the test runner. Holding one back makes the
 * test the one that delivers it (`runDurableObjectAlarm`), so it asserts what
 * the handler did rather than racing it. `op` (which leaves a short lease)
 * runs on the shard itself and the alarm is postponed in the same event:
 * postponed by a later call, the short lease's own alarm could fire in
 * between on a loaded machine, and its handler, ending with nothing left
 * running, deleted the postponed alarm.
 */
async function thenPostpone<T>(stub: Shard, op: (shard: ReceiptShard, state: DurableObjectState) => Promise<T>): Promise<T> {
  return runInDurableObject(stub, async (instance: ReceiptShard, state) => {
    const result = await op(instance, state);
    await state.storage.setAlarm(Date.now() + 3_600_000);
    return result;
  });
}

async function scheduledAlarm(stub: Shard) {
  return runInDurableObject(stub, (_shard, state) => state.storage.getAlarm());
}

async function rejection(promise: PromiseLike<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error("expected the call to reject");
}

async function claim(
  stub: Shard | ReceiptShard,
  who: AttemptRef,
  keys: string[],
  options: { refresh?: boolean; leaseTtlMs?: number } = {},
) {
  const { results } = await stub.claim({
    attempt: who,
    leaseTtlMs: options.leaseTtlMs ?? LONG_LEASE_MS,
    refresh: options.refresh ?? false,
    items: keys.map((key) => ({ key, toolId: "email.find" })),
  });
  return results;
}

/** A receipt completed by run `a` and deliberately re-billed by run `b`: generation 1, running, owned by `b`. */
async function atGenerationOne(stub: Shard | ReceiptShard, key: string, b: AttemptRef, leaseTtlMs = LONG_LEASE_MS) {
  const a = attempt(`run-a-${crypto.randomUUID()}`);
  await claim(stub, a, [key]);
  expect(await stub.complete({ attempt: a, items: [{ key, output: { email: "old@x.com" } }] })).toEqual({ accepted: [key], rejected: [] });
  expect(await claim(stub, b, [key], { refresh: true, leaseTtlMs })).toEqual([{ key, disposition: "claimed", generation: 1 }]);
}

describe("claim dispositions", () => {
  it("claims a new key for the attempt at generation 0", async () => {
    const stub = shard();
    const a = attempt("run-a");
    const before = Date.now();
    expect(await claim(stub, a, ["k1"])).toEqual([{ key: "k1", disposition: "claimed", generation: 0 }]);
    const receipt = await stub.get({ key: "k1" });
    expect(receipt).toMatchObject({ key: "k1", toolId: "email.find", status: "running", owner: a, generation: 0 });
    expect(receipt!.leaseExpiresAt).toBeGreaterThanOrEqual(before + LONG_LEASE_MS);
  });

  it("reuses a completed receipt's output in another run", async () => {
    const stub = shard();
    await claim(stub, attempt("run-a"), ["k1"]);
    const output = { email: "ada@example.com", score: 0.93, tags: ["a", "b"] };
    await stub.complete({ attempt: attempt("run-a"), items: [{ key: "k1", output }] });
    expect(await claim(stub, attempt("run-b"), ["k1"])).toEqual([
      { key: "k1", disposition: "reused", output, generation: 0, finishedByRun: "run-a" },
    ]);
    expect(await stub.get({ key: "k1" })).toMatchObject({ status: "completed", output, finishedByRun: "run-a", leaseExpiresAt: null });
  });

  it("completes hundreds of receipts with sizeable outputs in one call, past SQLite's 2 MB bound on one parameter", async () => {
    const stub = shard();
    const a = attempt("run-big");
    const keys = Array.from({ length: 300 }, (_, i) => `big-${i}`);
    await claim(stub, a, keys);
    // 300 outputs of 10,000 characters: 3 MB as one JSON parameter.
    const output = (i: number) => ({ i, page: "x".repeat(10_000) });
    expect(await stub.complete({ attempt: a, items: keys.map((key, i) => ({ key, output: output(i) })) })).toEqual({
      accepted: keys,
      rejected: [],
    });
    expect(await claim(stub, attempt("run-next"), [keys[299]!])).toEqual([
      { key: keys[299], disposition: "reused", output: output(299), generation: 0, finishedByRun: "run-big" },
    ]);
  });

  it("reports a receipt running under another live run with its owner", async () => {
    const stub = shard();
    const a = attempt("run-a", 2);
    await claim(stub, a, ["k1"]);
    const [result] = await claim(stub, attempt("run-b"), ["k1"]);
    expect(result).toMatchObject({ key: "k1", disposition: "running", owner: a });
    expect(result?.disposition === "running" && result.leaseExpiresAt).toBeGreaterThan(Date.now());
    expect(await stub.get({ key: "k1" })).toMatchObject({ owner: a });
  });

  it("reports a non-retryable failure with its error", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1"]);
    const error = { code: "not_found", message: "no such domain" };
    expect(await stub.fail({ attempt: a, items: [{ key: "k1", error, retryable: false }] })).toEqual({ accepted: ["k1"], rejected: [] });
    expect(await claim(stub, attempt("run-b"), ["k1"])).toEqual([{ key: "k1", disposition: "failed", error }]);
    expect(await claim(stub, a, ["k1"])).toEqual([{ key: "k1", disposition: "failed", error }]);
  });

  it("reclaims a retryable failure with the same generation", async () => {
    const stub = shard();
    const b = attempt("run-b");
    await atGenerationOne(stub, "k1", b);
    await stub.fail({ attempt: b, items: [{ key: "k1", error: { code: "http_503", message: "unavailable" }, retryable: true }] });
    const c = attempt("run-c");
    expect(await claim(stub, c, ["k1"])).toEqual([{ key: "k1", disposition: "claimed", generation: 1, takeover: true }]);
    expect(await stub.get({ key: "k1" })).toMatchObject({ status: "running", owner: c, error: null, generation: 1 });
  });

  it("claims a receipt failed outcome_unknown again only under retryUnknown, and says its outcome is still unknown", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1"]);
    const error = { code: "outcome_unknown", message: "the provider may have executed it" };
    await stub.fail({ attempt: a, items: [{ key: "k1", error, retryable: false }] });
    expect(await claim(stub, attempt("run-b"), ["k1"])).toEqual([{ key: "k1", disposition: "failed", error }]);
    // Claimed again, it is still a request the provider may have executed: a refusal or a stop before it is sent
    // must leave it so (it did not say, and a cut-off resend made it not_sent, which a plain rerun sent again).
    const { results } = await stub.claim({
      attempt: attempt("run-c"),
      leaseTtlMs: LONG_LEASE_MS,
      refresh: false,
      retryUnknown: true,
      items: [{ key: "k1", toolId: "email.find" }],
    });
    expect(results).toEqual([{ key: "k1", disposition: "claimed", generation: 0, takeover: true, unknownOutcome: true }]);
  });

  it("says takeover only when an attempt had claimed the generation and not completed it", async () => {
    const stub = shard();
    const a = attempt("run-a");
    expect(await claim(stub, a, ["k1"])).toEqual([{ key: "k1", disposition: "claimed", generation: 0 }]);
    // A newer attempt of its run takes it over (the owner may have reached the provider).
    expect(await claim(stub, attempt("run-a", 1), ["k1"])).toEqual([
      { key: "k1", disposition: "claimed", generation: 0, takeover: true, unknownOutcome: true },
    ]);
    // A deliberate re-bill of a completed receipt starts a new generation: nobody claimed it before.
    await stub.complete({ attempt: attempt("run-a", 1), items: [{ key: "k1", output: 1 }] });
    expect(await claim(stub, attempt("run-b"), ["k1"], { refresh: true })).toEqual([{ key: "k1", disposition: "claimed", generation: 1 }]);
  });

  it("lets the owner claim again what it left running, as a takeover, refreshing the lease", async () => {
    const stub = shard();
    const b = attempt("run-b");
    await atGenerationOne(stub, "k1", b, 1_000);
    const first = (await stub.get({ key: "k1" }))!.leaseExpiresAt!;
    await sleep(5);
    // An attempt claims a call once an invocation: claimed again, it was left running by an earlier invocation of the
    // attempt (wound down with its request's end unknown), which may have sent it.
    expect(await claim(stub, b, ["k1"])).toEqual([
      { key: "k1", disposition: "claimed", generation: 1, takeover: true, unknownOutcome: true },
    ]);
    expect((await stub.get({ key: "k1" }))!.leaseExpiresAt).toBeGreaterThan(first + LONG_LEASE_MS - 1_000);
    expect((await stub.get({ key: "k1" }))!.unknownFrom).toEqual([b.attemptId]);
  });

  it("processes a key repeated in one request in order", async () => {
    const stub = shard();
    const results = await claim(stub, attempt("run-a"), ["k1", "k2", "k1"]);
    expect(results).toEqual([
      { key: "k1", disposition: "claimed", generation: 0 },
      { key: "k2", disposition: "claimed", generation: 0 },
      { key: "k1", disposition: "claimed", generation: 0, takeover: true, unknownOutcome: true },
    ]);
  });

  it("rejects malformed input with a classifiable code", async () => {
    const stub = shard();
    const badTtl = await rejection(stub.claim({ attempt: attempt("run-a"), leaseTtlMs: -1, refresh: false, items: [] }));
    // The code crosses the RPC boundary as data, beside a message naming the field.
    expect(codeOf(badTtl)).toBe("invalid_request");
    expect(badTtl.message).toMatch(/leaseTtlMs/);
    expect(codeOf(await rejection(stub.get({ key: "" })))).toBe("invalid_request");
  });
});

describe("takeover and fencing", () => {
  it("hands a running receipt to a newer attempt of the same run, fencing the old one", async () => {
    const stub = shard();
    const old = attempt("run-b", 0);
    await atGenerationOne(stub, "k1", old);
    const newer = attempt("run-b", 1);
    expect(await claim(stub, newer, ["k1"])).toEqual([
      { key: "k1", disposition: "claimed", generation: 1, takeover: true, unknownOutcome: true },
    ]);

    // The old attempt can neither take it back, write it, nor renew it.
    expect(await claim(stub, old, ["k1"])).toMatchObject([{ disposition: "running", owner: newer }]);
    expect(await stub.complete({ attempt: old, items: [{ key: "k1", output: "stale" }] })).toEqual({ accepted: [], rejected: ["k1"] });
    expect(await stub.fail({ attempt: old, items: [{ key: "k1", error: { code: "x", message: "y" }, retryable: false }] })).toEqual({
      accepted: [],
      rejected: ["k1"],
    });
    expect(await stub.renew({ attempt: old, keys: ["k1"], leaseTtlMs: LONG_LEASE_MS })).toEqual({ renewed: [], lost: ["k1"] });
    expect(await stub.get({ key: "k1" })).toMatchObject({ status: "running", owner: newer, output: null });

    expect(await stub.complete({ attempt: newer, items: [{ key: "k1", output: "fresh" }] })).toEqual({ accepted: ["k1"], rejected: [] });
    // Even after the new owner finished, the old attempt's late write is rejected and changes nothing.
    expect(await stub.complete({ attempt: old, items: [{ key: "k1", output: "stale" }] })).toEqual({ accepted: [], rejected: ["k1"] });
    expect(await stub.get({ key: "k1" })).toMatchObject({ status: "completed", output: "fresh", owner: newer });
  });

  it("treats a repeated complete as harmless and keeps the first output", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1"]);
    expect(await stub.complete({ attempt: a, items: [{ key: "k1", output: 1 }] })).toEqual({ accepted: ["k1"], rejected: [] });
    expect(await stub.complete({ attempt: a, items: [{ key: "k1", output: 1 }] })).toEqual({ accepted: ["k1"], rejected: [] });
    expect(await stub.fail({ attempt: a, items: [{ key: "k1", error: { code: "x", message: "y" }, retryable: true }] })).toEqual({
      accepted: [],
      rejected: ["k1"],
    });
    expect(await stub.get({ key: "k1" })).toMatchObject({ status: "completed", output: 1, error: null });
    expect(await stub.complete({ attempt: a, items: [{ key: "never-claimed", output: 1 }] })).toEqual({
      accepted: [],
      rejected: ["never-claimed"],
    });
  });

  it("renews only the leases the attempt holds", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["mine"], { leaseTtlMs: 1_000 });
    await claim(stub, attempt("run-b"), ["theirs"]);
    const result = await stub.renew({ attempt: a, keys: ["mine", "theirs", "missing"], leaseTtlMs: LONG_LEASE_MS });
    expect(result).toEqual({ renewed: ["mine"], lost: ["theirs", "missing"] });
    expect((await stub.get({ key: "mine" }))!.leaseExpiresAt).toBeGreaterThan(Date.now() + LONG_LEASE_MS / 2);
  });
});

describe("dead owners", () => {
  it("expires a dead owner's lease by alarm, then another run reclaims it at the same generation", async () => {
    const stub = shard();
    const dead = attempt("run-b");
    await thenPostpone(stub, (shard) => atGenerationOne(shard, "k1", dead, SHORT_LEASE_MS));
    await sleep(PAST_SHORT_LEASE_MS);
    expect(await stub.get({ key: "k1" })).toMatchObject({ status: "running", owner: dead });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await stub.get({ key: "k1" })).toMatchObject({
      status: "failed",
      retryable: true,
      error: { code: "lease_expired", message: expect.stringContaining("stopped heartbeating") },
      leaseExpiresAt: null,
    });
    // Nothing else is running, so the alarm was deleted rather than re-armed.
    expect(await scheduledAlarm(stub)).toBeNull();
    expect(await claim(stub, attempt("run-c"), ["k1"])).toEqual([
      { key: "k1", disposition: "claimed", generation: 1, takeover: true, unknownOutcome: true },
    ]);
  });

  it("reclaims an expired lease at claim time, before any alarm ran", async () => {
    const stub = shard();
    const dead = attempt("run-b");
    await thenPostpone(stub, (shard) => atGenerationOne(shard, "k1", dead, SHORT_LEASE_MS));
    await sleep(PAST_SHORT_LEASE_MS);
    expect(await stub.get({ key: "k1" })).toMatchObject({ status: "running", owner: dead });
    const c = attempt("run-c");
    expect(await claim(stub, c, ["k1"])).toEqual([
      { key: "k1", disposition: "claimed", generation: 1, takeover: true, unknownOutcome: true },
    ]);
    expect(await stub.complete({ attempt: dead, items: [{ key: "k1", output: "late" }] })).toEqual({ accepted: [], rejected: ["k1"] });
    expect(await stub.get({ key: "k1" })).toMatchObject({ status: "running", owner: c });
  });

  it("keeps a late result from the expired owner when nobody took the receipt over", async () => {
    const stub = shard();
    const slow = attempt("run-b");
    await thenPostpone(stub, (shard) => claim(shard, slow, ["k1"], { leaseTtlMs: SHORT_LEASE_MS }));
    await sleep(PAST_SHORT_LEASE_MS);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await stub.get({ key: "k1" })).toMatchObject({ status: "failed", error: { code: "lease_expired" } });
    expect(await stub.complete({ attempt: slow, items: [{ key: "k1", output: "billed" }] })).toEqual({ accepted: ["k1"], rejected: [] });
    expect(await claim(stub, attempt("run-c"), ["k1"])).toEqual([
      { key: "k1", disposition: "reused", output: "billed", generation: 0, finishedByRun: "run-b" },
    ]);
  });

  it("keeps the late answer of a request whose taker failed it outcome_unknown; other attempts' writes stay fenced", async () => {
    const stub = shard();
    const sender = attempt("run-a");
    await claim(stub, sender, ["k1", "k2"]);
    // Run A is torn down with both requests in flight: its receipts are released, and run B takes them over. Its
    // provider cannot be asked how they ended: it fails k1 `outcome_unknown`, and k2 for a reason of its own.
    await stub.releaseRun({ runId: "run-a" });
    const taker = attempt("run-b");
    await claim(stub, taker, ["k1", "k2"]);
    const unknown = { code: "outcome_unknown", message: "the provider may have executed it" };
    await stub.fail({ attempt: taker, items: [{ key: "k1", error: unknown, retryable: false }] });
    await stub.fail({ attempt: taker, items: [{ key: "k2", error: { code: "invalid_input", message: "no" }, retryable: false }] });
    // A's answers come: k1's is the unknown outcome itself, billed, and kept; k2's taker decided otherwise.
    const late = [
      { key: "k1", output: "billed" },
      { key: "k2", output: "late" },
    ];
    // Another attempt's answer is not the request the taker was unsure of: refused.
    expect(await stub.complete({ attempt: attempt("run-z"), items: [{ key: "k1", output: "other" }] })).toEqual({
      accepted: [],
      rejected: ["k1"],
    });
    expect(await stub.complete({ attempt: sender, items: late })).toEqual({ accepted: ["k1"], rejected: ["k2"] });
    // The same write again (its answer lost): a repeat, accepted, the first output kept.
    expect(await stub.complete({ attempt: sender, items: [{ key: "k1", output: "again" }] })).toEqual({ accepted: ["k1"], rejected: [] });
    expect(await claim(stub, attempt("run-c"), ["k1"])).toEqual([
      { key: "k1", disposition: "reused", output: "billed", generation: 0, finishedByRun: "run-a" },
    ]);
    // Taken over twice before the taker gave up (the first taker released unsure, sending nothing): the sender's
    // answer still settles it.
    await claim(stub, sender, ["k3"]);
    await stub.releaseRun({ runId: "run-a" });
    await claim(stub, attempt("run-d"), ["k3"]);
    await stub.releaseRun({ runId: "run-d" });
    const lastTaker = attempt("run-e");
    await claim(stub, lastTaker, ["k3"]);
    await claim(stub, lastTaker, ["k3"]); // claimed again by its owner: still remembers who may answer
    await stub.fail({ attempt: lastTaker, items: [{ key: "k3", error: unknown, retryable: false }] });
    expect(await stub.complete({ attempt: sender, items: [{ key: "k3", output: "billed" }] })).toEqual({ accepted: ["k3"], rejected: [] });
    // A failure from an attempt that does not own the receipt is still refused.
    expect(await stub.fail({ attempt: sender, items: [{ key: "k2", error: unknown, retryable: false }] })).toEqual({
      accepted: [],
      rejected: ["k2"],
    });
  });

  it("re-arms the alarm for the next lease and leaves live leases alone", async () => {
    const stub = shard();
    const a = attempt("run-a");
    const armed = await thenPostpone(stub, async (shard, state) => {
      await claim(shard, a, ["short"], { leaseTtlMs: SHORT_LEASE_MS });
      await claim(shard, a, ["long"], { leaseTtlMs: LONG_LEASE_MS });
      return { alarm: await state.storage.getAlarm(), short: (await shard.get({ key: "short" }))!.leaseExpiresAt };
    });
    expect(armed.alarm).toBe(armed.short);
    await sleep(PAST_SHORT_LEASE_MS);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await stub.get({ key: "short" })).toMatchObject({ status: "failed", error: { code: "lease_expired" } });
    expect(await scheduledAlarm(stub)).toBe((await stub.get({ key: "long" }))!.leaseExpiresAt);
    // Delivered again early (at-least-once): the live lease survives.
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await stub.get({ key: "long" })).toMatchObject({ status: "running", owner: a });
    await stub.complete({ attempt: a, items: [{ key: "long", output: null }] });
    expect(await scheduledAlarm(stub)).toBeNull();
  });
});

describe("refresh (forceToolRefresh)", () => {
  it("re-claims a receipt finished by another run with generation + 1, but reuses one finished by this run", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["done", "broken"]);
    await stub.complete({ attempt: a, items: [{ key: "done", output: "v0" }] });
    await stub.fail({ attempt: a, items: [{ key: "broken", error: { code: "bad_input", message: "no" }, retryable: false }] });

    const sameRun = attempt("run-a", 1);
    expect(await claim(stub, sameRun, ["done", "broken"], { refresh: true })).toEqual([
      { key: "done", disposition: "reused", output: "v0", generation: 0, finishedByRun: "run-a" },
      { key: "broken", disposition: "failed", error: { code: "bad_input", message: "no" } },
    ]);

    const b = attempt("run-b");
    expect(await claim(stub, b, ["done", "broken"], { refresh: true })).toEqual([
      { key: "done", disposition: "claimed", generation: 1 },
      { key: "broken", disposition: "claimed", generation: 1 },
    ]);
    await stub.complete({ attempt: b, items: [{ key: "done", output: "v1" }] });
    // Run b finished generation 1; refreshing again within run b reuses it.
    expect(await claim(stub, attempt("run-b", 1), ["done"], { refresh: true })).toEqual([
      { key: "done", disposition: "reused", output: "v1", generation: 1, finishedByRun: "run-b" },
    ]);
    expect(await stub.get({ key: "done" })).toMatchObject({ generation: 1, finishedByRun: "run-b" });
  });
});

describe("staleBefore (a call's staleAfterSeconds, reckoned from its run's start)", () => {
  it("re-claims a result another run finished before it with generation + 1; later ones and this run's are reused", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["done", "broken"]);
    await stub.complete({ attempt: a, items: [{ key: "done", output: "v0" }] });
    await stub.fail({ attempt: a, items: [{ key: "broken", error: { code: "bad_input", message: "no" }, retryable: false }] });
    const stale = (who: AttemptRef, staleBefore: number) =>
      stub.claim({
        attempt: who,
        leaseTtlMs: LONG_LEASE_MS,
        refresh: false,
        items: ["done", "broken"].map((key) => ({ key, toolId: "email.find", staleBefore })),
      });
    const b = attempt("run-b");
    expect((await stale(b, Date.now() - 60_000)).results).toEqual([
      { key: "done", disposition: "reused", output: "v0", generation: 0, finishedByRun: "run-a" },
      { key: "broken", disposition: "failed", error: { code: "bad_input", message: "no" } },
    ]);
    await sleep(20);
    // Finished before the time, but by run a: a redispatch or a replay of run a never pays again.
    expect((await stale(attempt("run-a", 1), Date.now())).results).toEqual([
      { key: "done", disposition: "reused", output: "v0", generation: 0, finishedByRun: "run-a" },
      { key: "broken", disposition: "failed", error: { code: "bad_input", message: "no" } },
    ]);
    expect((await stale(b, Date.now())).results).toEqual([
      { key: "done", disposition: "claimed", generation: 1 },
      { key: "broken", disposition: "claimed", generation: 1 },
    ]);
    // Running under run b now: another run waits for it, however fresh it wants results.
    expect((await stale(attempt("run-c"), Date.now())).results.map((r) => r.disposition)).toEqual(["running", "running"]);
  });
});

describe("a refresh (forceToolRefresh, force), which carries its run's start as staleBefore", () => {
  const refresh = (stub: Shard, who: AttemptRef, startedAt: number, takeover = false) =>
    stub.claim({
      attempt: who,
      leaseTtlMs: LONG_LEASE_MS,
      refresh: true,
      items: [{ key: "k", toolId: "email.find", takeover, staleBefore: startedAt }],
    });

  it("reuses the generation its run bought when another run finished it (its dead attempt's, taken over)", async () => {
    const stub = shard();
    const q = attempt("run-q");
    await claim(stub, q, ["k"]);
    await stub.complete({ attempt: q, items: [{ key: "k", output: "q" }] });
    await sleep(5);
    const startedAt = Date.now();
    expect((await refresh(stub, attempt("run-r", 0), startedAt)).results).toEqual([{ key: "k", disposition: "claimed", generation: 1 }]);
    // Run r's attempt died after its request was billed; run s takes the receipt over, recovers that answer, completes it.
    const s = attempt("run-s");
    const { results } = await stub.claim({
      attempt: s,
      leaseTtlMs: LONG_LEASE_MS,
      refresh: false,
      items: [{ key: "k", toolId: "email.find", takeover: true }],
    });
    expect(results).toEqual([{ key: "k", disposition: "claimed", generation: 1, takeover: true, unknownOutcome: true }]);
    await stub.complete({ attempt: s, items: [{ key: "k", output: "r's answer" }] });
    // Run r's redispatched attempt: what its first attempt bought, not a second bill.
    expect((await refresh(stub, attempt("run-r", 1), startedAt)).results).toEqual([
      { key: "k", disposition: "reused", output: "r's answer", generation: 1, finishedByRun: "run-s" },
    ]);
  });

  it("judges a result by when its request could have gone out, not when it was written back", async () => {
    const stub = shard();
    // Run q claims before run r starts; its answer (salvaged, or settling an unknown outcome) is written after.
    const q = attempt("run-q");
    await claim(stub, q, ["k"]);
    await sleep(5);
    const startedAt = Date.now();
    await sleep(5);
    await stub.complete({ attempt: q, items: [{ key: "k", output: "bought before r started" }] });
    expect((await refresh(stub, attempt("run-r"), startedAt)).results).toEqual([{ key: "k", disposition: "claimed", generation: 1 }]);
  });

  it("dates a generation from its first request whose end is unknown, and from the retry after a known failure", async () => {
    const stub = shard();
    const q = attempt("run-q");
    await claim(stub, q, ["unknown", "refused"], { leaseTtlMs: SHORT_LEASE_MS });
    // "refused" was answered a retryable failure (a 429): nothing was bought by that request.
    await stub.fail({ attempt: q, items: [{ key: "refused", error: { code: "rate_limited", message: "429" }, retryable: true }] });
    await sleep(PAST_SHORT_LEASE_MS);
    const startedAt = Date.now();
    await sleep(5);
    // Run s takes both over after run r started: "unknown"'s answer may be q's request's, bought before.
    const s = attempt("run-s");
    expect((await claim(stub, s, ["unknown", "refused"])).map((r) => [r.disposition, "generation" in r ? r.generation : null])).toEqual([
      ["claimed", 0],
      ["claimed", 0],
    ]);
    await stub.complete({ attempt: s, items: ["unknown", "refused"].map((key) => ({ key, output: key })) });
    const { results } = await stub.claim({
      attempt: attempt("run-r"),
      leaseTtlMs: LONG_LEASE_MS,
      refresh: true,
      items: ["unknown", "refused"].map((key) => ({ key, toolId: "email.find", staleBefore: startedAt })),
    });
    expect(results).toEqual([
      { key: "unknown", disposition: "claimed", generation: 1 },
      { key: "refused", disposition: "reused", output: "refused", generation: 0, finishedByRun: "run-s" },
    ]);
  });

  it("keeps the date of a request taken over unknown through a known failure since: its late answer may still settle it", async () => {
    const stub = shard();
    const sender = attempt("run-a");
    await claim(stub, sender, ["k"]);
    await stub.releaseRun({ runId: "run-a" });
    // Run b takes it over (run a's request may have gone out) and is answered a 429: run a's answer can still come.
    const taker = attempt("run-b");
    await claim(stub, taker, ["k"]);
    await stub.fail({ attempt: taker, items: [{ key: "k", error: { code: "rate_limited", message: "429" }, retryable: true }] });
    await sleep(5);
    const startedAt = Date.now();
    await sleep(5);
    const third = attempt("run-c");
    await claim(stub, third, ["k"]);
    await stub.fail({ attempt: third, items: [{ key: "k", error: { code: OUTCOME_UNKNOWN, message: "?" }, retryable: false }] });
    expect(await stub.complete({ attempt: sender, items: [{ key: "k", output: "run a's" }] })).toEqual({ accepted: ["k"], rejected: [] });
    expect((await refresh(stub, attempt("run-r"), startedAt)).results).toEqual([{ key: "k", disposition: "claimed", generation: 1 }]);
  });

  it("pays once per run: a result another refresh bought after this run started is reused", async () => {
    const stub = shard();
    const q = attempt("run-q");
    await claim(stub, q, ["k"]);
    await stub.complete({ attempt: q, items: [{ key: "k", output: "q" }] });
    await sleep(5);
    const rStarted = Date.now();
    expect((await refresh(stub, attempt("run-r", 0), rStarted)).results).toMatchObject([{ disposition: "claimed", generation: 1 }]);
    await stub.complete({ attempt: attempt("run-r", 0), items: [{ key: "k", output: "r" }] });
    await sleep(5);
    const sStarted = Date.now();
    expect((await refresh(stub, attempt("run-s"), sStarted)).results).toMatchObject([{ disposition: "claimed", generation: 2 }]);
    await stub.complete({ attempt: attempt("run-s"), items: [{ key: "k", output: "s" }] });
    expect((await refresh(stub, attempt("run-r", 1), rStarted)).results).toMatchObject([{ disposition: "reused", generation: 2 }]);
  });
});

describe("write: completions, failures and claims in one call", () => {
  it("writes them in that order in one transaction, answering each part, the claims per refresh group", async () => {
    const stub = shard();
    const a = attempt(`run-a-${crypto.randomUUID()}`);
    await claim(stub, a, ["done", "broken"]);
    const other = attempt(`run-o-${crypto.randomUUID()}`);
    await claim(stub, other, ["theirs"]);
    const error = { code: "not_found", message: "no such domain" };
    const result = await stub.write({
      attempt: a,
      complete: [
        { key: "done", output: { email: "ada@x.com" } },
        { key: "theirs", output: { email: "not ours" } },
      ],
      fail: [{ key: "broken", error, retryable: false }],
      claims: [
        // "done" is completed by this same call before its claim: reused; "fresh" is new.
        {
          leaseTtlMs: LONG_LEASE_MS,
          refresh: false,
          items: [
            { key: "fresh", toolId: "email.verify" },
            { key: "done", toolId: "email.find" },
          ],
        },
        { leaseTtlMs: LONG_LEASE_MS, refresh: true, items: [{ key: "broken", toolId: "email.find" }] },
      ],
    });
    expect(result.completed).toEqual({ accepted: ["done"], rejected: ["theirs"] });
    expect(result.failed).toEqual({ accepted: ["broken"], rejected: [] });
    expect(result.claims).toEqual([
      [
        { key: "fresh", disposition: "claimed", generation: 0 },
        { key: "done", disposition: "reused", output: { email: "ada@x.com" }, generation: 0, finishedByRun: a.runId },
      ],
      [{ key: "broken", disposition: "failed", error }],
    ]);
    expect(await stub.get({ key: "fresh" })).toMatchObject({ status: "running", owner: a });
    expect(await stub.get({ key: "theirs" })).toMatchObject({ status: "running", owner: other });
  });

  it("refuses the whole call, writing nothing, when any part is malformed", async () => {
    const stub = shard();
    const a = attempt(`run-a-${crypto.randomUUID()}`);
    await claim(stub, a, ["k1"]);
    const failure = await rejection(
      stub.write({
        attempt: a,
        complete: [{ key: "k1", output: { ok: true } }],
        fail: [],
        claims: [{ leaseTtlMs: 0, refresh: false, items: [{ key: "k2", toolId: "email.find" }] }],
      }),
    );
    expect(codeOf(failure)).toBe("invalid_request");
    expect(await stub.get({ key: "k1" })).toMatchObject({ status: "running" });
    expect(await stub.get({ key: "k2" })).toBeNull();
  });
});

describe("teardown", () => {
  it("releaseRun makes the run's running receipts reclaimable at once", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["k1", "k2", "k3"]);
    await stub.complete({ attempt: a, items: [{ key: "k3", output: "kept" }] });
    await claim(stub, attempt("run-other"), ["other"]);

    expect(await stub.releaseRun({ runId: "run-a" })).toEqual({ released: 2 });
    expect(await stub.get({ key: "k1" })).toMatchObject({ status: "failed", retryable: true, error: { code: "released" } });
    expect(await stub.get({ key: "other" })).toMatchObject({ status: "running" });

    const b = attempt("run-b");
    expect(await claim(stub, b, ["k1", "k2", "k3"])).toEqual([
      { key: "k1", disposition: "claimed", generation: 0, takeover: true, unknownOutcome: true },
      { key: "k2", disposition: "claimed", generation: 0, takeover: true, unknownOutcome: true },
      { key: "k3", disposition: "reused", output: "kept", generation: 0, finishedByRun: "run-a" },
    ]);
    expect(await stub.releaseRun({ runId: "run-a" })).toEqual({ released: 0 });
  });
});

describe("scale and durability", () => {
  it("claims, completes and reuses 500 receipts in one call each", async () => {
    const stub = shard();
    const keys = Array.from({ length: 500 }, (_, i) => `key-${i}`);
    const a = attempt("run-a");
    const claimed = await claim(stub, a, keys);
    expect(claimed).toHaveLength(500);
    expect(claimed.every((r, i) => r.key === keys[i] && r.disposition === "claimed")).toBe(true);

    const written = await stub.complete({ attempt: a, items: keys.map((key, i) => ({ key, output: { i } })) });
    expect(written.accepted).toHaveLength(500);
    expect(written.rejected).toEqual([]);

    const reused = await claim(stub, attempt("run-b"), keys);
    expect(reused).toEqual(keys.map((key, i) => ({ key, disposition: "reused", output: { i }, generation: 0, finishedByRun: "run-a" })));
  });

  it("keeps receipts and their alarm across eviction", async () => {
    const stub = shard();
    const a = attempt("run-a");
    await claim(stub, a, ["done", "dying"]);
    await stub.complete({ attempt: a, items: [{ key: "done", output: { ok: true } }] });
    await thenPostpone(stub, (shard) => shard.renew({ attempt: a, keys: ["dying"], leaseTtlMs: SHORT_LEASE_MS }));

    await evictDurableObject(stub);
    await sleep(PAST_SHORT_LEASE_MS);
    // `get` does not touch the alarm, so the one delivered below is the one stored before eviction.
    expect(await stub.get({ key: "done" })).toMatchObject({ status: "completed", output: { ok: true } });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await stub.get({ key: "dying" })).toMatchObject({ status: "failed", error: { code: "lease_expired" } });
    expect(await claim(stub, attempt("run-b"), ["done", "dying"])).toEqual([
      { key: "done", disposition: "reused", output: { ok: true }, generation: 0, finishedByRun: "run-a" },
      { key: "dying", disposition: "claimed", generation: 0, takeover: true, unknownOutcome: true },
    ]);
  });
});

describe("a shard whose lease index held every receipt (schema version 1)", () => {
  it("is upgraded in place: its completed receipts are still reused, and a dead owner's running one still expires", async () => {
    const stub = shard();
    const a = attempt(`run-${crypto.randomUUID()}`);
    const leaseTtlMs = 500;
    await thenPostpone(stub, async (shard) => {
      await claim(shard, a, ["done", "left"], { leaseTtlMs });
      await shard.complete({ attempt: a, items: [{ key: "done", output: { email: "a@x.com" } }] });
    });
    // Back to version 1: the index of every receipt by (status, lease expiry).
    await runInDurableObject(stub, (_shard, state) => {
      state.storage.sql.exec("DROP INDEX receipts_running_by_lease");
      state.storage.sql.exec("CREATE INDEX receipts_by_lease ON receipts (status, lease_expires_at)");
      state.storage.sql.exec("ALTER TABLE receipts DROP COLUMN unknown_from");
      state.storage.sql.exec("ALTER TABLE receipts DROP COLUMN bought_at");
      state.storage.sql.exec("UPDATE _schema SET version = 1");
    });
    await evictDurableObject(stub);

    // Restarted, the constructor migrated it: only running receipts are indexed by lease.
    const indexes = await runInDurableObject(stub, (_shard, state) =>
      state.storage.sql
        .exec<{ name: string; sql: string }>(
          "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'receipts' AND sql IS NOT NULL",
        )
        .toArray(),
    );
    expect(indexes.map((index) => index.name)).toEqual(["receipts_running_by_lease"]);
    expect(indexes[0]!.sql).toContain("WHERE status = 'running'");
    await sleep(leaseTtlMs + 50);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await stub.get({ key: "left" })).toMatchObject({ status: "failed", error: { code: "lease_expired" } });
    expect(await claim(stub, attempt(`run-${crypto.randomUUID()}`), ["done", "left"])).toMatchObject([
      { key: "done", disposition: "reused", output: { email: "a@x.com" } },
      { key: "left", disposition: "claimed", takeover: true, unknownOutcome: true },
    ]);
  });
});
