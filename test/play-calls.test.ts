/**
 * The play's own calls under leases (src/runtime/invocation/play-calls.ts), over fake receipt shards and a fake
 * scheduler: renewals in bulk while calls are pending and none once they settle, a call stopped by a lost lease
 * claimed again under a fresh attempt, and a call's own failure left alone.
 */
import { describe, expect, it } from "vitest";
import type { ReceiptClient } from "../src/clients/shards";
import type { AttemptRef, LeaseRequest, LeaseResult } from "../src/contracts/shards";
import { AttemptLeases, LeaseLostError } from "../src/runtime/map/attempt-leases";
import { PlayCalls } from "../src/runtime/invocation/play-calls";
import type { ToolScheduler } from "../src/runtime/tools/tool-scheduler";

const policy = { rowLeaseTtlMs: 60_000, receiptLeaseTtlMs: 60_000, heartbeatIntervalMs: 20 };

/** Receipt shards that renew what they hold; `lost` keys come back lost. */
function fakeShards() {
  const state = { lost: new Set<string>(), renewals: [] as { shard: number; attemptId: string; keys: string[] }[] };
  const receipts = {
    renew: async (shard: number, request: LeaseRequest): Promise<LeaseResult> => {
      state.renewals.push({ shard, attemptId: request.attempt.attemptId, keys: [...request.keys] });
      return { renewed: request.keys.filter((k) => !state.lost.has(k)), lost: request.keys.filter((k) => state.lost.has(k)) };
    },
  } as unknown as ReceiptClient;
  return { state, receipts };
}

/** A call of the fake scheduler: claims `key` on `shard`, then ends as the test says (or with its attempt's stop). */
interface FakeCall {
  attempt: AttemptRef;
  key: string;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

function playCallsOver(shards: ReturnType<typeof fakeShards>) {
  const calls: FakeCall[] = [];
  const run = new AbortController();
  const play = new PlayCalls({
    runId: "run_p",
    attemptSeq: () => 1,
    invocation: "inv1",
    signal: run.signal,
    leases: (attempt, stop) =>
      new AttemptLeases({ attempt, sheets: null, receipts: shards.receipts, policy, signal: stop, now: Date.now, log: () => {} }),
    scheduler: (attempt, leases) =>
      ({
        call: (_tool: string, input: unknown) =>
          new Promise((resolve, reject) => {
            const { key, shard } = input as { key: string; shard: number };
            leases.claimed(shard, [key]);
            const end = (settle: () => void) => () => {
              leases.finished(shard, [key], 1);
              settle();
            };
            leases.signal.addEventListener("abort", () => reject(leases.signal.reason), { once: true });
            calls.push({ attempt, key, resolve: (value) => end(() => resolve(value))(), reject: (error) => end(() => reject(error))() });
          }),
      }) as unknown as ToolScheduler,
  });
  return { play, calls, run };
}

const until = async (ok: () => boolean) => {
  for (let i = 0; !ok(); i++) {
    if (i > 500) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 5));
  }
};
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("PlayCalls", () => {
  it("renews the pending calls' receipts one call per shard per beat, and stops once they settle", async () => {
    const shards = fakeShards();
    const { play, calls } = playCallsOver(shards);
    const results = [
      play.call("t", { key: "a", shard: 0 }),
      play.call("t", { key: "b", shard: 0 }),
      play.call("t", { key: "c", shard: 1 }),
    ];
    await until(() => shards.state.renewals.length >= 4);
    const beat = shards.state.renewals.slice(0, 2).sort((x, y) => x.shard - y.shard);
    expect(beat).toEqual([
      { shard: 0, attemptId: "run_p/play/1@inv1", keys: ["a", "b"] },
      { shard: 1, attemptId: "run_p/play/1@inv1", keys: ["c"] },
    ]);
    for (const call of calls) call.resolve(call.key);
    expect(await Promise.all(results)).toEqual(["a", "b", "c"]);
    const renewals = shards.state.renewals.length;
    await pause(10 * policy.heartbeatIntervalMs);
    expect(shards.state.renewals.length).toBe(renewals);

    // A later call starts the heartbeat again, for its receipt alone.
    const later = play.call("t", { key: "d", shard: 1 });
    await until(() => shards.state.renewals.length > renewals);
    expect(shards.state.renewals.at(-1)).toEqual({ shard: 1, attemptId: "run_p/play/1@inv1", keys: ["d"] });
    calls.at(-1)!.resolve("d");
    expect(await later).toBe("d");
  });

  it("claims a call stopped by a lost lease again under a fresh attempt, and leaves a call's own failure alone", async () => {
    const shards = fakeShards();
    const { play, calls } = playCallsOver(shards);
    const stolen = play.call("t", { key: "a", shard: 0 });
    const failing = play.call("t", { key: "b", shard: 1 });
    await until(() => calls.length === 2);
    calls[1]!.reject(new Error("the provider said no"));
    await expect(failing).rejects.toThrow("the provider said no");

    shards.state.lost.add("a");
    await until(() => calls.length === 3);
    expect(calls[2]!.attempt.attemptId).toBe("run_p/play/1@inv1.1");
    shards.state.lost.clear();
    calls[2]!.resolve("a, from its new owner");
    expect(await stolen).toBe("a, from its new owner");
  });

  it("fails a call whose lease is lost time after time, and never claims again after the run stopped", async () => {
    const shards = fakeShards();
    const { play, calls, run } = playCallsOver(shards);
    shards.state.lost.add("a");
    await expect(play.call("t", { key: "a", shard: 0 })).rejects.toBeInstanceOf(LeaseLostError);
    expect(calls.map((c) => c.attempt.attemptId)).toEqual(["run_p/play/1@inv1", "run_p/play/1@inv1.1", "run_p/play/1@inv1.2"]);

    shards.state.lost.clear();
    const stopped = play.call("t", { key: "b", shard: 0 });
    await until(() => calls.length === 4);
    run.abort(new Error("cancelled"));
    await expect(stopped).rejects.toThrow("cancelled");
    expect(calls).toHaveLength(4);
  });
});
