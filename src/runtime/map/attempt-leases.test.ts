import { describe, expect, it } from "vitest";
import type { LeaseRequest, LeaseResult } from "../../contracts/shards";
import { AttemptLeases, LeaseLostError } from "./attempt-leases";
import type { ReceiptClient, SheetClient } from "../../clients/shards";

const attempt = { attemptId: "run_x/items/0/0", runId: "run_x", attemptSeq: 0 };

/** Shards that renew what they hold; `lose` takes keys away, `fail` makes renewals throw. */
function fakeShards() {
  const state = {
    lostKeys: new Set<string>(),
    fail: false,
    rowCalls: [] as string[][],
    receiptCalls: [] as { shard: number; keys: string[] }[],
    during: null as null | (() => void),
  };
  const answer = (keys: readonly string[]): LeaseResult => {
    state.during?.();
    if (state.fail) throw new Error("shard unreachable");
    return { renewed: keys.filter((k) => !state.lostKeys.has(k)), lost: keys.filter((k) => state.lostKeys.has(k)) };
  };
  const sheets = {
    renewLeases: async (_a: unknown, keys: readonly string[]) => (state.rowCalls.push([...keys]), answer(keys)),
  } as unknown as SheetClient;
  const receipts = {
    renew: async (shard: number, request: LeaseRequest) => (state.receiptCalls.push({ shard, keys: request.keys }), answer(request.keys)),
  } as unknown as ReceiptClient;
  return { state, sheets, receipts };
}

function leasesOver(
  shards: ReturnType<typeof fakeShards>,
  policy = { rowLeaseTtlMs: 60_000, receiptLeaseTtlMs: 60_000, heartbeatIntervalMs: 60_000 },
  signal = new AbortController().signal,
) {
  const lines: string[] = [];
  const leases = new AttemptLeases({
    attempt,
    sheets: shards.sheets,
    receipts: shards.receipts,
    policy,
    signal,
    now: Date.now,
    log: (l) => lines.push(l),
  });
  return { leases, lines };
}

const aborted = (signal: AbortSignal) =>
  new Promise<unknown>((resolve) =>
    signal.aborted ? resolve(signal.reason) : signal.addEventListener("abort", () => resolve(signal.reason), { once: true }),
  );

describe("AttemptLeases", () => {
  it("renews every row and receipt it holds in one call per shard, and forgets what finished", async () => {
    const shards = fakeShards();
    const { leases } = leasesOver(shards);
    leases.holdRows(["a", "b", "c"]);
    leases.claimed(0, ["r1", "r2"]);
    leases.claimed(2, ["r3"]);
    leases.releaseRows(["b"]);
    leases.finished(0, ["r2"], 1);
    await leases.beat();
    expect(shards.state.rowCalls).toEqual([["a", "c"]]);
    expect(shards.state.receiptCalls).toEqual([
      { shard: 0, keys: ["r1"] },
      { shard: 2, keys: ["r3"] },
    ]);
    expect(leases.signal.aborted).toBe(false);
  });

  it("aborts the attempt, naming the keys, when a beat finds a lease gone", async () => {
    const shards = fakeShards();
    const { leases, lines } = leasesOver(shards);
    leases.holdRows(["a", "b"]);
    leases.claimed(1, ["r1"]);
    shards.state.lostKeys = new Set(["b", "r1"]);
    await leases.beat();
    const reason = leases.signal.reason;
    expect(reason).toBeInstanceOf(LeaseLostError);
    expect((reason as LeaseLostError).keys).toEqual({ rows: ["b"], receipts: ["r1"] });
    expect(leases.lost).toBe(reason);
    expect(lines).toEqual([expect.stringContaining("run_x/items/0/0 lost its leases")]);
  });

  it("does not take a key finished while the beat was out for lost", async () => {
    const shards = fakeShards();
    const { leases } = leasesOver(shards);
    leases.holdRows(["a"]);
    leases.claimed(0, ["r1"]);
    // The persist and the completion land first: the shards no longer hold the keys for this attempt.
    shards.state.lostKeys = new Set(["a", "r1"]);
    shards.state.during = () => {
      leases.releaseRows(["a"]);
      leases.finished(0, ["r1"], 1);
    };
    await leases.beat();
    expect(leases.signal.aborted).toBe(false);
  });

  it("stops the attempt by its own clock when no beat confirms the leases before they expire", async () => {
    const shards = fakeShards();
    shards.state.fail = true;
    const { leases, lines } = leasesOver(shards, { rowLeaseTtlMs: 200, receiptLeaseTtlMs: 200, heartbeatIntervalMs: 40 });
    leases.holdRows(["a"]);
    leases.start();
    const reason = await aborted(leases.signal);
    await leases.stop();
    expect((reason as Error).message).toContain("could not confirm its leases");
    expect(lines.some((l) => l.includes("heartbeat of run_x/items/0/0 failed (shard unreachable)"))).toBe(true);
  });

  it("follows the run's signal, and stop() ends the heartbeat", async () => {
    const shards = fakeShards();
    const run = new AbortController();
    const { leases } = leasesOver(shards, { rowLeaseTtlMs: 60_000, receiptLeaseTtlMs: 60_000, heartbeatIntervalMs: 10 }, run.signal);
    leases.holdRows(["a"]);
    leases.start();
    await until(() => shards.state.rowCalls.length >= 2);
    await leases.stop();
    const beats = shards.state.rowCalls.length;
    run.abort(new Error("cancelled"));
    expect(leases.signal.aborted).toBe(true);
    expect(leases.lost).toBeNull();
    await new Promise((r) => setTimeout(r, 30));
    expect(shards.state.rowCalls.length).toBe(beats);
  });
});

async function until(ok: () => boolean): Promise<void> {
  while (!ok()) await new Promise((r) => setTimeout(r, 5));
}
