/**
 * A capped parent that cancels its child (a `ctx.runPlay` past its `timeoutMs`, or the parent's own cancel) counts
 * what the child spent, not what it allotted it: the child tells it its spend as it ends, though the parent waits on
 * it no more.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, expect, it } from "vitest";
import { childOf, clearFaults, faultState, setFaults, until } from "./chaos-helpers";
import { allEvents, apiJson, simReset, startRun, waitForRun } from "./helpers";

afterEach(clearFaults);

/** What the run's coordinator counts of each child's spend (its allotment, or what it spent once ended). */
function childSpend(runId: string): Promise<{ child: string; micros: number; ended: number }[]> {
  return runInDurableObject(env.RUN_COORDINATOR.getByName(runId), (_object: unknown, state: DurableObjectState) =>
    state.storage.sql
      .exec<{ child: string; micros: number; ended: number }>("SELECT child_run_id AS child, micros, ended FROM child_spend")
      .toArray(),
  );
}

function leads(prefix: string, n: number): { id: string; name: string; domain: string }[] {
  return Array.from({ length: n }, (_, i) => ({ id: `${prefix}-${i}`, name: `${prefix} Lead ${i}`, domain: "cancelled-child.test" }));
}

/** What `parent` counts of its child's spend, once it counts it as final. */
function countedAsFinal(parent: string): Promise<{ child: string; micros: number; ended: number }[]> {
  return until(
    () => childSpend(parent),
    (rows) => rows[0]?.ended === 1,
    "the parent to count what its cancelled child spent",
    15_000,
  );
}

/** The child spends one lead (a find, 1 credit, and a verify, 0.25), then waits for a `go` that never comes. */
const LEAD_MICROS = 1_250_000;
const child = (tag: string) => ({ first: leads(`child-${tag}`, 1), second: [] });

it.each([
  ["as its end is told", []],
  ["when the first telling fails", [{ point: "child.finished", times: 1 }]],
])("a capped parent whose child timed out counts what the child spent, not its allotment (%s)", async (_, faults) => {
  await simReset();
  await setFaults(faults);
  const tag = crypto.randomUUID().slice(0, 8);
  // A child and 64 leads, 81.25 credits of a cap of 100: room for all, unless the child's allotment (a quarter of
  // the cap) is counted for good in place of what it spent.
  const parent = await startRun(
    "test-child-then-enrich",
    { play: "test-enrich-in-two", input: child(tag), timeoutMs: 4_000, leads: leads(`parent-${tag}`, 64) },
    { maxSpend: 100 },
  );
  const childRunId = await childOf(parent);
  expect(await countedAsFinal(parent)).toEqual([{ child: childRunId, micros: LEAD_MICROS, ended: 1 }]);
  const ended = await waitForRun(childRunId);
  expect(ended.status).toBe("cancelled");
  expect(ended.usage.spend.total).toBe(1.25);
  if (faults.length > 0) expect((await faultState()).counts).toEqual([2]);

  expect((await apiJson(`/v1/runs/${parent}/signals/go`, { method: "POST", json: { data: true } })).status).toBe(202);
  const run = await waitForRun(parent, { timeoutMs: 60_000 });
  expect(run.status).toBe("completed");
  expect(run.result).toEqual({ child: { code: "child_timeout" }, completed: 64, failed: 0 });
  expect(run.usage.spend.total).toBe(80);
  expect(await childSpend(parent)).toEqual([{ child: childRunId, micros: LEAD_MICROS, ended: 1 }]);
});

it("a capped parent cancelled while its child runs counts what the child spent once both have ended", async () => {
  await simReset();
  const tag = crypto.randomUUID().slice(0, 8);
  const parent = await startRun("test-run-child", { play: "test-enrich-in-two", input: child(tag) }, { maxSpend: 100 });
  const childRunId = await childOf(parent);
  await until(
    () => allEvents(childRunId),
    (events) => events.some((e) => e.type === "wait.started"),
    "the child to spend its lead and wait for go",
  );
  expect((await childSpend(parent))[0]).toMatchObject({ ended: 0 });
  expect((await apiJson(`/v1/runs/${parent}/cancel`, { method: "POST" })).status).toBe(202);
  expect((await waitForRun(parent)).status).toBe("cancelled");
  expect((await waitForRun(childRunId)).status).toBe("cancelled");
  expect(await countedAsFinal(parent)).toEqual([{ child: childRunId, micros: LEAD_MICROS, ended: 1 }]);
});
