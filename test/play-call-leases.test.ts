/**
 * A call the play makes itself (outside any map) holds its receipt as a chunk attempt's calls do: renewed while it
 * waits to send (here held at provider.before, as a long pacing wait, a 429 backoff or a spend grant would hold it),
 * and never sent once another run has taken the receipt over. The `test-play-call` play makes one such call.
 */
import { env } from "cloudflare:workers";
import { afterEach, expect, it } from "vitest";
import { receiptShardName } from "../src/clients/shards";
import { shardOf } from "../src/core/hash";
import { AuthScopes } from "../src/runtime/tools/auth-scope";
import { receiptKey } from "../src/runtime/tools/receipt-keys";
import { toolRegistry } from "../src/tools/index";
import { clearFaults, setFaults, until } from "./chaos-helpers";
import { expectedEmail, notices, runView, simReset, simStats, startRun, waitForRun } from "./helpers";

const faults = () => env.FAULTS!.getByName("faults");

/** Leases far shorter than the wait below; beats well inside them. */
const testPolicy = { receiptLeaseTtlMs: 1_000, heartbeatIntervalMs: 150 };

afterEach(async () => {
  await faults().release(0);
  await faults().release(1);
  await clearFaults();
});

async function receiptOf(tool: string, input: unknown) {
  const found = toolRegistry(env as Env).get(tool)!;
  const authScope = await new AuthScopes({ env: env as Env }).digest(found);
  const key = await receiptKey({ org: "dev", toolId: tool, toolVersion: found.version, input, authScope });
  return env.RECEIPT_SHARD.getByName(receiptShardName("dev", shardOf(key, 2))).get({ key });
}

/** The provider was called once and billed once, and `runId` completed the call's receipt. */
async function expectBilledOnceBy(tool: string, input: unknown, runId: string): Promise<void> {
  expect(await simStats()).toMatchObject({ calls: 1, billed: 1, duplicates: 0 });
  const receipt = await receiptOf(tool, input);
  expect(receipt?.status).toBe("completed");
  expect(receipt?.finishedByRun).toBe(runId);
}

/** Starts the first run, whose call is held before it sends for well past its receipt's lease, which it keeps. */
async function heldPastItsLease(tool: string, input: { name: string; domain: string }): Promise<string> {
  await simReset();
  await setFaults([{ point: "provider.before", tool, hold: true, times: 1 }]);
  const first = await startRun("test-play-call", { tool, input }, { testPolicy });
  await faults().held(0);
  await new Promise((resolve) => setTimeout(resolve, 3 * testPolicy.receiptLeaseTtlMs));
  const receipt = await receiptOf(tool, input);
  expect(receipt?.status).toBe("running");
  expect(receipt?.owner.runId).toBe(first);
  expect(receipt!.leaseExpiresAt!).toBeGreaterThan(Date.now());
  return first;
}

it("keeps a play-level call's receipt while it waits to send: another run waits for it, and the provider bills once", async () => {
  // A provider that ignores idempotency keys: a live owner is waited for as long as it lives.
  const tool = "test_unkeyed_lookup_find";
  const input = { name: "Play Lease Unkeyed", domain: "play-lease.test" };
  const first = await heldPastItsLease(tool, input);
  const second = await startRun("test-play-call", { tool, input }, { testPolicy });
  // Past its receipt wait and another lease: still waiting for the first run's call.
  await new Promise((resolve) => setTimeout(resolve, 2 * testPolicy.receiptLeaseTtlMs));
  expect((await runView(second)).status).toBe("running");
  expect((await receiptOf(tool, input))?.owner.runId).toBe(first);

  expect(await faults().release(0)).toBe(1);
  const [a, b] = [await waitForRun(first), await waitForRun(second)];
  const out = { email: expectedEmail(input.name, input.domain) };
  expect(a.status).toBe("completed");
  expect(a.result).toEqual({ out });
  expect(b.status).toBe("completed");
  expect(b.result).toEqual({ out });
  await expectBilledOnceBy(tool, input, first);
  expect(a.usage.spend.total + b.usage.spend.total).toBe(1);
});

it("never sends a play-level call whose receipt another run took over: it reuses that run's answer, billed once", async () => {
  // A keyed provider: after its receipt wait, the second run takes the receipt over from the live owner and sends.
  const tool = "sim_find_email";
  const input = { name: "Play Lease Keyed", domain: "play-lease.test" };
  const first = await heldPastItsLease(tool, input);
  const second = await startRun("test-play-call", { tool, input }, { testPolicy });
  const b = await waitForRun(second);
  const out = { email: expectedEmail(input.name, input.domain) };
  expect(b.status).toBe("completed");
  expect(b.result).toEqual({ out });
  // The first run's heartbeat hears its receipt is gone before its held call goes on.
  await until(
    () => notices(first),
    (codes) => codes.includes("leases_lost"),
    "the first run to notice its receipt was taken over",
  );

  expect(await faults().release(0)).toBe(1);
  const a = await waitForRun(first);
  expect(a.status).toBe("completed");
  expect(a.result).toEqual({ out });
  await expectBilledOnceBy(tool, input, second);
  expect(a.usage.spend.total).toBe(0);
  expect(b.usage.spend.total).toBe(1);
});

it("a play-level call that loses its lease after a failed try takes the other run's result, not that failure", async () => {
  await simReset();
  const tool = "sim_find_email";
  const input = { name: "Play Lease Retried", domain: "play-lease.test" };
  // The first try fails (retryable), the second is held: the loss then stops a call whose last error is that failure.
  await setFaults([
    { point: "provider.before", tool, times: 1, error: { code: "provider_unavailable", retryable: true } },
    { point: "provider.before", tool, hold: true, fromCall: 2, times: 1 },
  ]);
  const first = await startRun("test-play-call", { tool, input }, { testPolicy });
  await faults().held(1);
  // Another run takes the receipt over once its wait for the live owner runs out, and completes it.
  const second = await waitForRun(await startRun("test-play-call", { tool, input }, { testPolicy }));
  expect(second.status).toBe("completed");
  await until(
    () => notices(first),
    (codes) => codes.includes("leases_lost"),
    "the first run to lose its receipt's lease",
  );
  expect(await faults().release(1)).toBe(1);
  const run = await waitForRun(first);
  expect(run.status, JSON.stringify(run.error)).toBe("completed");
  expect(run.result).toEqual({ out: { email: expectedEmail(input.name, input.domain) } });
  expect(await simStats()).toMatchObject({ billed: 1, duplicates: 0 });
}, 60_000);
