/**
 * A run parked on a child asks the child how it is doing at each check (the fallback for its lost end), without
 * replaying its play: nothing the play waits on has changed until an entry of its journal settles.
 */
import { expect, it, afterEach } from "vitest";
import { clearFaults, faultState, setFaults, until } from "./chaos-helpers";
import { allEvents, apiJson, runView, startRun, waitForRun } from "./helpers";

afterEach(clearFaults);

/** The child the run started, once it has. */
async function childOf(runId: string): Promise<string> {
  const events = await until(
    () => allEvents(runId),
    (found) => found.some((e) => e.type === "child.started"),
    `run ${runId} to start its child`,
  );
  return (events.find((e) => e.type === "child.started") as never as { childRunId: string }).childRunId;
}

/** The run, once it is parked and has asked its child at least `checks` times. */
function checkedAtLeast(runId: string, checks: number): Promise<any> {
  return until(
    () => runView(runId),
    (run) => run.status === "waiting" && (run.usage.objectRpcsByKind["run.getRun"] ?? 0) >= checks,
    `run ${runId} to ask its child ${checks} times`,
  );
}

it("a run parked on a long child asks it at every check without replaying its play, and goes on when it ends", async () => {
  // Counts the parent's status changes told to its org's directory (each replay of a parked run is two: running,
  // waiting again); fires at none.
  await setFaults([{ point: "directory.sync", play: "test-parent", fromCall: 1_000_000 }]);
  const n = Date.now() * 1000 + 11;
  const parent = await startRun("test-parent", { leaf: { n, waitForSignal: true } }, { testPolicy: { childCheckIntervalMs: 200 } });
  const child = await childOf(parent);
  const first = await checkedAtLeast(parent, 2);
  const synced = (await faultState()).counts[0]!;
  const later = await checkedAtLeast(parent, first.usage.objectRpcsByKind["run.getRun"] + 5);
  expect(later.status).toBe("waiting");
  expect((await faultState()).counts[0]).toBe(synced);

  expect((await apiJson(`/v1/runs/${child}/signals/go`, { method: "POST", json: { data: true } })).status).toBe(202);
  const run = await waitForRun(parent);
  expect(run.status).toBe("completed");
  expect(run.result).toEqual({ first: { n, doubled: 2 * n }, second: null });
});
