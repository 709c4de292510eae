/**
 * A request whose run was torn down while it was in flight, taken over by another run that could not learn how it
 * ended (its provider ignores idempotency keys and cannot be asked): the taker fails the receipt `outcome_unknown`,
 * and the request's answer, billed, comes after. It is kept: the receipt holds it, the run that sent it counts the
 * bill, and a rerun reuses it rather than paying again.
 */
import { env } from "cloudflare:workers";
import { afterEach, expect, it } from "vitest";
import { receiptShardName } from "../src/clients/shards";
import { shardOf } from "../src/core/hash";
import { AuthScopes } from "../src/runtime/tools/auth-scope";
import { receiptKey } from "../src/runtime/tools/receipt-keys";
import { toolRegistry } from "../src/tools/index";
import { SIM_DEFAULTS, setSim, until } from "./chaos-helpers";
import { apiJson, datasetRows, runView, simReset, simStats, startRun, waitForRun } from "./helpers";

afterEach(async () => {
  await setSim(SIM_DEFAULTS);
});

async function receiptOf(toolId: string, input: unknown) {
  const tool = toolRegistry(env as Env).get(toolId)!;
  const authScope = await new AuthScopes({ env: env as Env }).digest(tool);
  const key = await receiptKey({ org: "dev", toolId, toolVersion: tool.version, input, authScope, nowMs: Date.now() });
  return env.RECEIPT_SHARD.getByName(receiptShardName("dev", shardOf(key, 2))).get({ key });
}

it("keeps a billed answer that comes after another run failed its receipt outcome_unknown, and a rerun reuses it", async () => {
  await simReset();
  // Slow enough that the first run is cancelled, and the second run done, while the request is at the provider.
  await setSim({ ...SIM_DEFAULTS, latencyMs: 4_000 });
  const input = { name: "Late Answer", domain: "late-answer.test" };
  const rows = [{ id: "r0", tool: "test_unkeyed_find", input }];
  const first = await startRun("test-calls", { rows, dataset: "late-answer-a" });
  await until(simStats, (stats) => stats.calls >= 1, "the first run's request at the provider");
  expect((await apiJson(`/v1/runs/${first}/cancel`, { method: "POST" })).status).toBe(202);
  expect((await waitForRun(first)).status).toBe("cancelled");
  // The same call, at once: the receipt was released with the request in flight, and cannot be asked about.
  const second = await waitForRun(await startRun("test-calls", { rows, dataset: "late-answer-b" }));
  expect((await datasetRows(second.runId, "late-answer-b"))[0]).toMatchObject({ _status: "failed" });
  expect((await receiptOf("test_unkeyed_find", input))?.error?.code).toBe("outcome_unknown");

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

  // A plain rerun of the second run reuses it: no call sent again.
  await setSim(SIM_DEFAULTS);
  const rerun = await apiJson(`/v1/runs/${second.runId}/rerun`, { method: "POST", json: {} });
  const again = await waitForRun(rerun.body.runId);
  expect(again.status).toBe("completed");
  expect((await datasetRows(again.runId, "late-answer-b"))[0]).toMatchObject({ _status: "completed" });
  expect(await simStats()).toMatchObject({ calls: 1, billed: 1, duplicates: 0 });
}, 60_000);
