/**
 * `staleAfterSeconds` of a tool call: a result another run finished longer ago
 * than that is called (and billed) again; the run that finished it reuses it
 * whatever its age, so a replay, a retry or a redispatch never pays twice.
 * The key no longer rolls over with the clock: a call replayed across a
 * stale-after boundary got a new key, and a second bill. Calls are made by the
 * `test-play-call` play (one play-level call, then an optional sleep).
 */
import { env } from "cloudflare:workers";
import { expect, it } from "vitest";
import { receiptShardName } from "../src/clients/shards";
import { shardOf } from "../src/core/hash";
import { AuthScopes } from "../src/runtime/tools/auth-scope";
import { idempotencyKey, receiptKey } from "../src/runtime/tools/receipt-keys";
import { toolRegistry } from "../src/tools/index";
import { apiJson, expectedEmail, simReset, simStats, startRun, waitForRun } from "./helpers";

const tool = "sim_find_email";

async function receiptOf(input: unknown) {
  const found = toolRegistry(env as Env).get(tool)!;
  const authScope = await new AuthScopes({ env: env as Env }).digest(found);
  const key = await receiptKey({ org: "dev", toolId: tool, toolVersion: found.version, input, authScope });
  return { key, receipt: await env.RECEIPT_SHARD.getByName(receiptShardName("dev", shardOf(key, 2))).get({ key }) };
}

async function call(input: { name: string; domain: string }, options: { staleAfterSeconds?: number; sleepMs?: number } = {}) {
  const run = await waitForRun(await startRun("test-play-call", { tool, input, ...options }));
  expect(run.status, JSON.stringify(run.error)).toBe("completed");
  expect(run.result).toEqual({ out: { email: expectedEmail(input.name, input.domain) } });
  return run;
}

/** Longer than the stale-after seconds the tests below use, so a result is surely older than it. */
const pastOneSecond = () => new Promise((resolve) => setTimeout(resolve, 1_100));

it("replays a call across its stale-after time without paying again: the run that finished it reuses it", async () => {
  await simReset();
  const input = { name: "Stale Replay", domain: "stale.test" };
  // The play sleeps past the call's staleAfterSeconds; when it wakes, it is replayed and makes the call again.
  const run = await call(input, { staleAfterSeconds: 1, sleepMs: 1_100 });
  expect(await simStats()).toMatchObject({ calls: 1, billed: 1, duplicates: 0 });
  expect(run.usage.spend.total).toBe(1);
  const { receipt } = await receiptOf(input);
  expect(receipt).toMatchObject({ status: "completed", generation: 0, finishedByRun: run.runId });
});

it("reuses another run's result younger than staleAfterSeconds, and calls again once it is older", async () => {
  await simReset();
  const input = { name: "Stale Across Runs", domain: "stale.test" };
  const first = await call(input);
  const fresh = await call(input, { staleAfterSeconds: 3_600 });
  expect(fresh.usage.spend.total).toBe(0);
  expect(await simStats()).toMatchObject({ calls: 1, billed: 1 });

  await pastOneSecond();
  // What the run will do, estimated first: the call is new again.
  const estimate = await apiJson("/v1/runs/estimate", {
    method: "POST",
    json: { play: "test-play-call", input: { tool, input, staleAfterSeconds: 1 } },
  });
  expect(estimate.status).toBe(200);
  expect(estimate.body.calls[tool]).toEqual({ reused: 0, new: 1 });
  const reestimated = await apiJson("/v1/runs/estimate", {
    method: "POST",
    json: { play: "test-play-call", input: { tool, input, staleAfterSeconds: 3_600 } },
  });
  expect(reestimated.body.calls[tool]).toEqual({ reused: 1, new: 0 });

  const stale = await call(input, { staleAfterSeconds: 1 });
  expect(stale.usage.spend.total).toBe(1);
  // A new generation: a new idempotency key, so the provider executes and bills it again.
  expect(await simStats()).toMatchObject({ calls: 2, billed: 2, duplicates: 0 });
  const { key, receipt } = await receiptOf(input);
  expect(receipt).toMatchObject({ status: "completed", generation: 1, finishedByRun: stale.runId });
  expect(await idempotencyKey(key, 1)).not.toBe(await idempotencyKey(key, 0));
  // The newest result is what a call without staleAfterSeconds reuses.
  const after = await call(input);
  expect(after.usage.spend.total).toBe(0);
  expect(first.runId).not.toBe(stale.runId);
  expect(await simStats()).toMatchObject({ calls: 2, billed: 2 });
});

it("refuses a staleAfterSeconds that is not a number ≥ 0, calling nothing", async () => {
  await simReset();
  const run = await waitForRun(
    await startRun("test-play-call", { tool, input: { name: "Stale Bad", domain: "stale.test" }, staleAfterSeconds: -1 }),
  );
  expect(run.status).toBe("failed");
  expect(JSON.stringify(run.error)).toContain("staleAfterSeconds must be a number ≥ 0");
  expect(await simStats()).toMatchObject({ calls: 0 });
});

it("replays a call that reused another run's result as it first did, however old that result has grown since", async () => {
  await simReset();
  const input = { name: "Stale Replay Reused", domain: "stale.test" };
  const first = await call(input);
  // Fresh when this run starts (it finished less than 3 s before, however loaded the machine), stale by the time the
  // play wakes and replays the call (3 s after its first pass, itself after the run's start).
  const run = await call(input, { staleAfterSeconds: 3, sleepMs: 3_000 });
  expect(run.usage.spend.total).toBe(0);
  expect(await simStats()).toMatchObject({ calls: 1, billed: 1 });
  expect((await receiptOf(input)).receipt).toMatchObject({ generation: 0, finishedByRun: first.runId });
});

it("claims a call that accepts less than another of the same receipt in the attempt after it, not as its follower", async () => {
  await simReset();
  const input = { name: "Stale Beside", domain: "stale.test" };
  await call(input);
  // Beside a call that takes the stored result, the same call asking for one younger than the run: made again.
  const run = await waitForRun(await startRun("test-play-call", { tool, input, also: { staleAfterSeconds: 0 } }));
  expect(run.status, JSON.stringify(run.error)).toBe("completed");
  const out = { email: expectedEmail(input.name, input.domain) };
  expect(run.result).toEqual({ out, also: out });
  expect(run.usage.spend.total).toBe(1);
  expect(await simStats()).toMatchObject({ calls: 2, billed: 2, duplicates: 0 });
  expect((await receiptOf(input)).receipt).toMatchObject({ generation: 1, finishedByRun: run.runId });
});
