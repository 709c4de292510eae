/**
 * A request whose run was torn down while it was in flight, taken over by another run that could not learn how it
 * ended (its provider ignores idempotency keys and cannot be asked): the taker fails the receipt `outcome_unknown`,
 * and the request's answer, billed, comes after (held here on its way back, at provider.after). It is kept: the receipt holds it, the run that sent it counts the
 * bill, and a rerun reuses it rather than paying again.
 */
import { env } from "cloudflare:workers";
import { afterEach, expect, it } from "vitest";
import { receiptShardName } from "../src/clients/shards";
import { shardOf } from "../src/core/hash";
import { AuthScopes } from "../src/runtime/tools/auth-scope";
import { receiptKey } from "../src/runtime/tools/receipt-keys";
import { toolRegistry } from "../src/tools/index";
import { clearFaults, heldBy, setFaults, until } from "./chaos-helpers";
import { apiJson, datasetRows, runView, simReset, simStats, startRun, waitForRun } from "./helpers";

const faults = () => env.FAULTS!.getByName("faults");

afterEach(async () => {
  await faults().release(0);
  await clearFaults();
});

async function receiptOf(toolId: string, input: unknown) {
  const tool = toolRegistry(env as Env).get(toolId)!;
  const authScope = await new AuthScopes({ env: env as Env }).digest(tool);
  const key = await receiptKey({ org: "dev", toolId, toolVersion: tool.version, input, authScope });
  return env.RECEIPT_SHARD.getByName(receiptShardName("dev", shardOf(key, 2))).get({ key });
}

it("keeps a billed answer that comes after another run failed its receipt outcome_unknown, and a rerun reuses it", async () => {
  await simReset();
  const input = { name: "Late Answer", domain: "late-answer.test" };
  const rows = [{ id: "r0", tool: "test_unkeyed_find", input }];
  // The first run's request is answered (and billed), and its answer held on its way back until the test lets it go.
  await setFaults([{ point: "provider.after", tool: "test_unkeyed_find", hold: true, times: 1 }]);
  const first = await startRun("test-calls", { rows, dataset: "late-answer-a" });
  await faults().held(0);
  expect((await apiJson(`/v1/runs/${first}/cancel`, { method: "POST" })).status).toBe(202);
  expect((await waitForRun(first)).status).toBe("cancelled");
  // The same call, at once: the receipt was released with the request in flight, and cannot be asked about.
  const second = await waitForRun(await startRun("test-calls", { rows, dataset: "late-answer-b" }));
  expect((await datasetRows(second.runId, "late-answer-b"))[0]).toMatchObject({ _status: "failed" });
  expect((await receiptOf("test_unkeyed_find", input))?.error?.code).toBe("outcome_unknown");
  expect(await faults().release(0)).toBe(1);

  // The first request's answer comes, billed: the receipt keeps it, and the run that sent it counts the bill.
  const receipt = await until(
    () => receiptOf("test_unkeyed_find", input),
    (found) => found?.status === "completed",
    "the late answer to complete the receipt",
  );
  expect(receipt).toMatchObject({ output: { email: "late.answer@late-answer.test" }, finishedByRun: first });
  expect(await simStats()).toMatchObject({ calls: 1, billed: 1 });
  await until(
    async () => (await runView(first)).usage.spend.total as number,
    (spent) => spent === 1,
    "the first run to count its bill",
  );

  // A plain rerun of the second run reuses it: no call sent again, and neither run after the first pays.
  const rerun = await apiJson(`/v1/runs/${second.runId}/rerun`, { method: "POST", json: {} });
  const again = await waitForRun(rerun.body.runId);
  expect(again.status).toBe("completed");
  expect((await datasetRows(again.runId, "late-answer-b"))[0]).toMatchObject({ _status: "completed" });
  expect(await simStats()).toMatchObject({ calls: 1, billed: 1, duplicates: 0 });
  expect((await runView(second.runId)).usage.spend.total).toBe(0);
  expect(again.usage.spend.total).toBe(0);
}, 60_000);

it("leaves a taken-over request to the next taker when the run stops during its lookup: not failed outcome_unknown", async () => {
  await simReset();
  const tool = "test_unkeyed_lookup_find";
  const input = { name: "Stopped Lookup", domain: "stopped-lookup.test" };
  const rows = [{ id: "s0", tool, input }];
  await setFaults([
    // The first run's request is answered (and billed), its answer held on its way back: it never completes the receipt.
    { point: "provider.after", tool, hold: true, times: 1 },
    // The second run's lookup of that request, held until the run has been cancelled.
    { point: "provider.lookup", tool, hold: true, times: 1 },
  ]);
  const first = await startRun("test-calls", { rows, dataset: "stopped-lookup-a" });
  await faults().held(0);
  expect((await apiJson(`/v1/runs/${first}/cancel`, { method: "POST" })).status).toBe(202);
  expect((await waitForRun(first)).status).toBe("cancelled");
  // The second run takes the request over and asks the provider; it is cancelled while it asks.
  const second = await startRun("test-calls", { rows, dataset: "stopped-lookup-b" }, { testPolicy: { maxExecutors: 0 } });
  await faults().held(1);
  expect((await apiJson(`/v1/runs/${second}/cancel`, { method: "POST" })).status).toBe(202);
  expect(await faults().release(1)).toBe(1);
  expect((await waitForRun(second)).status).toBe("cancelled");
  // Stopping says nothing of how the request ended: the receipt is not failed for good.
  expect((await receiptOf(tool, input))?.error?.code).not.toBe("outcome_unknown");
  // A third run asks the provider, which answered the first: its answer, with nothing sent or billed again.
  const third = await waitForRun(await startRun("test-calls", { rows, dataset: "stopped-lookup-c" }));
  expect((await datasetRows(third.runId, "stopped-lookup-c"))[0]).toMatchObject({
    _status: "completed",
    out: { email: "stopped.lookup@stopped-lookup.test" },
  });
  expect(await simStats()).toMatchObject({ calls: 1, billed: 1 });
  // The first request's answer, let go and waited for here: left to the file's teardown, its executor was still
  // ending its attempt as the environment closed (an unhandled teardown error under load).
  expect(await faults().release(0)).toBe(1);
  await until(
    () => heldBy(`${first}#0`),
    (held) => held.length === 0,
    "the first run's executor to end its attempt",
  );
}, 60_000);
