/**
 * A run parked on a child asks the child how it is doing at each check (the fallback for its lost end), without
 * replaying its play: nothing the play waits on has changed until an entry of its journal settles.
 */
import { expect, it, afterEach } from "vitest";
import { childOf, clearFaults, faultState, setFaults, setSim, SIM_DEFAULTS, until } from "./chaos-helpers";
import { apiJson, runView, startRun, waitForRun } from "./helpers";

afterEach(async () => {
  await clearFaults();
  await setSim(SIM_DEFAULTS);
});

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

it("a run parked by a row's long child goes on with the map's other rows at each check, and completes when the child ends", async () => {
  // Each row's call takes a while: the rows without a child cannot all end within the one row's inline wait.
  await setSim({ latencyMs: 100 });
  const n = Date.now() * 1000 + 13;
  const rows = Array.from({ length: 40 }, (_, i) => ({
    id: `oc${n}-${i}`,
    name: `One Child ${i}`,
    domain: "one-child.test",
    ...(i === 0 ? { child: n } : {}),
  }));
  // One row a chunk, four chunks at once in the coordinator: row 0's chunk waits on its child while the others run.
  const testPolicy = { childCheckIntervalMs: 200, chunkRows: 1, maxExecutors: 0 };
  const parent = await startRun("test-map-one-child", { rows }, { testPolicy });
  const child = await childOf(parent);
  // The row's child runs on (it waits for its signal): the run parks, yet the other 39 rows are not the child's to hold up.
  const parked = await until(
    () => runView(parent),
    (run) => run.progress.maps.rows?.completed === 39,
    `the rows of run ${parent} without a child to complete while row 0's child runs`,
  );
  expect(parked.status).not.toBe("completed");

  expect((await apiJson(`/v1/runs/${child}/signals/go`, { method: "POST", json: { data: true } })).status).toBe(202);
  const run = await waitForRun(parent);
  expect(run.status).toBe("completed");
  expect(run.result).toEqual({ completed: 40, failed: 0 });
});
