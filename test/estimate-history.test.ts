/**
 * The play history estimates learn from (each tool's billed requests per
 * computed row): a rerun that computes its rows again but answers their calls
 * from receipts must not make new rows look cheaper.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { until } from "./chaos-helpers";
import { apiJson, simReset, startRun, waitForRun } from "./helpers";

const leads = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, i) => ({ id: `${prefix}-${i}`, name: `${prefix} Person ${i}`, domain: "history.test" }));

const estimate = (body: unknown) => apiJson("/v1/runs/estimate", { method: "POST", json: body });

/** The run's coordinator is past adding the run to its play's history (whether it added it or not). */
async function historyHandled(runId: string): Promise<void> {
  const handled = () =>
    runInDurableObject(env.RUN_COORDINATOR.getByName(runId), (_object: unknown, state: DurableObjectState) => {
      const [row] = state.storage.sql.exec<{ value: number }>("SELECT value FROM counters WHERE name = 'play_history'").toArray();
      return row?.value ?? 0;
    });
  await until(handled, (count) => count > 0, `run ${runId} to add to its play's history`);
}

describe("the play history of estimates", () => {
  it("leaves out a force rerun (rows computed again, every call reused): new rows are expected to cost what the first run's did", async () => {
    await simReset();
    const fresh = { play: "demo-enrich", input: { rows: leads("Fresh", 40) } };
    // Each row one find (1 credit) and one verify (0.25): the verifications depend on emails not bought yet.
    const first = await waitForRun(await startRun("demo-enrich", { rows: leads("First", 20) }));
    expect(first.usage.spend.total).toBe(25);
    await historyHandled(first.runId);
    const before = await estimate(fresh);
    expect(before.body.spend).toEqual({ low: 40, expected: 50, high: 50 });

    const rerun = await apiJson(`/v1/runs/${first.runId}/rerun`, { method: "POST", json: { force: true } });
    expect(rerun.status).toBe(202);
    const forced = await waitForRun(rerun.body.runId);
    expect(forced).toMatchObject({ status: "completed", result: { rows: 20, failed: 0 } });
    expect(forced.usage.spend.total).toBe(0);
    await historyHandled(forced.runId);
    const after = await estimate(fresh);
    expect(after.body.spend).toEqual(before.body.spend);
    expect(after.body.notes.join(" ")).toContain("estimated from 1 past runs");

    // A refresh calls every provider again: its rows and bills are history like a first run's.
    const refresh = await apiJson(`/v1/runs/${first.runId}/rerun`, { method: "POST", json: { forceToolRefresh: true } });
    const refreshed = await waitForRun(refresh.body.runId);
    expect(refreshed.usage.spend.total).toBe(25);
    await historyHandled(refreshed.runId);
    const counted = await estimate(fresh);
    expect(counted.body.spend).toEqual(before.body.spend);
    expect(counted.body.notes.join(" ")).toContain("estimated from 2 past runs");
  });
});
