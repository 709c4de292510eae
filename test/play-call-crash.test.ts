/**
 * A play-level call (`ctx.tool` outside a map) whose invocation crashed after
 * its request reached the provider: the next invocation replays the play, in
 * the same attempt epoch (no chunk was running), and its call finds the
 * receipt still running under the dead invocation's attempt. It must take it
 * over as a dead owner's (ask the provider, or fail `outcome_unknown`), not
 * claim it as its own and send the request again: a provider that ignores
 * idempotency keys would execute and bill it twice.
 */
import { env } from "cloudflare:workers";
import { afterEach, expect, it } from "vitest";
import { receiptShardName } from "../src/clients/shards";
import { shardOf } from "../src/core/hash";
import { AuthScopes } from "../src/runtime/tools/auth-scope";
import { receiptKey } from "../src/runtime/tools/receipt-keys";
import { toolRegistry } from "../src/tools/index";
import { clearFaults, SIM_DEFAULTS, setFaults, setSim } from "./chaos-helpers";
import { expectedEmail, notices, simReset, simStats, startRun, waitForRun } from "./helpers";

afterEach(clearFaults);

async function receiptOf(tool: string, input: unknown) {
  const found = toolRegistry(env as Env).get(tool)!;
  const authScope = await new AuthScopes({ env: env as Env }).digest(found);
  const key = await receiptKey({ org: "dev", toolId: tool, toolVersion: found.version, input, authScope });
  return env.RECEIPT_SHARD.getByName(receiptShardName("dev", shardOf(key, 2))).get({ key });
}

/** Runs `test-play-call` whose one call crashes the coordinator once the provider has answered (and billed) it. */
async function crashedAfterTheProvider(tool: string, input: { name: string; domain: string }): Promise<any> {
  await simReset();
  await setFaults([{ point: "provider.after", tool, times: 1, crash: true }]);
  const runId = await startRun("test-play-call", { tool, input });
  // The replay takes the dead invocation's receipt over, found running or, on a slow machine, its lease already
  // expired: which one is timing, so what the tests check is only what the provider was sent and billed.
  return waitForRun(runId);
}

it("fails a call to a provider that ignores keys outcome_unknown after the crash, rather than paying for it twice", async () => {
  const tool = "test_unkeyed_find";
  const input = { name: "Crashed Unkeyed", domain: "play-crash.test" };
  const run = await crashedAfterTheProvider(tool, input);
  expect(run.status).toBe("failed");
  expect(run.error.code).toBe("outcome_unknown");
  expect(await simStats()).toMatchObject({ calls: 1, billed: 1 });
  expect(await receiptOf(tool, input)).toMatchObject({ status: "failed", error: { code: "outcome_unknown" } });
});

it("asks a provider that can be asked how the crashed call ended, and takes its answer: billed once", async () => {
  const tool = "test_unkeyed_lookup_find";
  const input = { name: "Crashed Lookup", domain: "play-crash.test" };
  const run = await crashedAfterTheProvider(tool, input);
  expect(run.status, JSON.stringify(run.error)).toBe("completed");
  expect(run.result).toEqual({ out: { email: expectedEmail(input.name, input.domain) } });
  expect(await simStats()).toMatchObject({ billed: 1, duplicates: 0 });
  expect(await receiptOf(tool, input)).toMatchObject({ status: "completed", finishedByRun: run.runId });
});

it("sends a keyed call again under its key after the crash: the provider answers it from the first, billed once", async () => {
  const tool = "sim_find_email";
  const input = { name: "Crashed Keyed", domain: "play-crash.test" };
  const run = await crashedAfterTheProvider(tool, input);
  expect(run.status, JSON.stringify(run.error)).toBe("completed");
  expect(run.result).toEqual({ out: { email: expectedEmail(input.name, input.domain) } });
  expect(await simStats()).toMatchObject({ billed: 1, duplicates: 0 });
  expect(run.usage.spend.total).toBe(1);
});

it("ends with its invocation a call still in flight as the play sleeps: the replay reuses its answer, billed once", async () => {
  await simReset();
  await setSim({ latencyMs: 1_500 });
  try {
    const tool = "sim_find_email";
    const input = { name: "Detached Call", domain: "play-crash.test" };
    // The sleep ends the invocation while the call is at the provider; the alarm that wakes the play comes long before its answer.
    const run = await waitForRun(await startRun("test-play-call", { tool, input, sleepMs: 10, detached: true }));
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toEqual({ out: { email: expectedEmail(input.name, input.domain) } });
    expect(await notices(run.runId)).not.toContain("receipt_taken_over");
    expect(await simStats()).toMatchObject({ calls: 1, billed: 1, duplicates: 0 });
    expect(run.usage.spend.total).toBe(1);
  } finally {
    await setSim(SIM_DEFAULTS);
  }
});
