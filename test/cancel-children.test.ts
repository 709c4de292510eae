/**
 * A cancel stops a run's child plays from spending at once: rows queued to
 * start children start none once the run is cancelled, and the children it
 * waits on are cancelled as the cancel arrives, not once the run has wound
 * down (its requests in flight can take minutes, and the children spend
 * meanwhile).
 */
import { env } from "cloudflare:workers";
import { afterEach, expect, it } from "vitest";
import { FAULT_OBJECT_NAME } from "../src/clients/faults";
import { clearFaults, faultState, setFaults, until } from "./chaos-helpers";
import { allEvents, api, apiJson, runView, simReset, startRun, waitForRun } from "./helpers";

const injector = () => env.FAULTS!.getByName(FAULT_OBJECT_NAME);

afterEach(async () => {
  // Cleared first: a call of this test's runs still going (a child's later status sync) is held no more, and
  // whatever is held is let go, so the next test's hold is its own.
  await clearFaults();
  await injector().release(0);
  await injector().release(1);
});

async function childrenOf(parentRunId: string): Promise<{ runId: string; status: string }[]> {
  return (await apiJson("/v1/runs?limit=200")).body.runs.filter((r: { parentRunId: string | null }) => r.parentRunId === parentRunId);
}

async function cancel(runId: string): Promise<void> {
  expect((await api(`/v1/runs/${runId}/cancel`, { method: "POST" })).status).toBe(202);
}

it("starts no child for rows still queued to start one when the run is cancelled", async () => {
  // The first starts are held (each child's first listing; the test policy starts 4 at once): the rows behind them
  // queue for their turn. Only those: a child's later syncs held would outlive the test.
  await setFaults([{ point: "directory.sync", play: "test-leaf", hold: true, times: 4 }]);
  const rows = Array.from({ length: 40 }, (_, i) => ({ id: `q${i}`, n: i }));
  const parent = await startRun("test-map-children", { rows });
  await injector().held(0);
  await cancel(parent);
  // Let every held start go on, and any start made after them, until the run has ended.
  const ended = await until(
    async () => {
      await injector().release(0);
      return runView(parent);
    },
    (run) => run.status === "cancelled",
    "the cancelled run to end",
  );
  expect(ended.status).toBe("cancelled");
  await injector().release(0);
  const children = await until(
    () => childrenOf(parent),
    (found) => found.length > 0,
    "the children started before the cancel to be listed",
  );
  // Only those whose start was under way (the test policy starts 4 at once), not the 40 rows'.
  expect(children.length).toBeLessThanOrEqual(4);
});

it("cancels the children it waits on as the cancel arrives, while its own call is still in flight", async () => {
  await simReset();
  // Held once the provider answered: sent, the call is waited for, so the run cannot end before it is released.
  await setFaults([{ point: "provider.after", tool: "sim_find_email", play: "test-child-beside-call", hold: true }]);
  const parent = await startRun("test-child-beside-call", {
    tool: "sim_find_email",
    input: { name: "Beside Child", domain: "cancel.test" },
  });
  await injector().held(0);
  const [child] = await until(
    () => childrenOf(parent),
    (found) => found.length === 1 && found[0]!.status === "waiting",
    "the child to start and wait",
  );
  await cancel(parent);
  // The parent's call is still held (its wind-down cannot end): the child is cancelled all the same.
  await until(
    () => runView(child!.runId),
    (run) => run.status === "cancelled",
    "the child to be cancelled",
  );
  expect((await runView(parent)).status).not.toBe("cancelled");
  expect(await injector().release(0)).toBe(1);
  expect((await waitForRun(parent)).status).toBe("cancelled");
});

it("allots its children no more of its cap once it is cancelling", async () => {
  await simReset();
  await setFaults([{ point: "provider.after", tool: "sim_find_email", play: "test-child-beside-call", hold: true }]);
  const input = { tool: "sim_find_email", input: { name: "Beside Child Capped", domain: "cancel.test" } };
  const parent = await startRun("test-child-beside-call", input, { maxSpend: 10 });
  await injector().held(0);
  const [child] = await until(
    () => childrenOf(parent),
    (found) => found.length === 1 && found[0]!.status === "waiting",
    "the child to start and wait",
  );
  const coordinator = env.RUN_COORDINATOR.getByName(parent);
  const micros = 1_000_000;
  // Asked while the parent runs, the child gets room: the ask itself is sound.
  expect((await coordinator.allotChildSpend("dev", child!.runId, micros, micros)).micros).toBe(micros);
  await cancel(parent);
  // Cancelling (its call still held, so not yet cancelled): a child whose cancel failed, asking again, gets nothing more.
  expect((await runView(parent)).status).toBe("cancelling");
  expect(await coordinator.allotChildSpend("dev", child!.runId, micros, micros)).toEqual({ micros, wait: false, ended: true });
  expect(await injector().release(0)).toBe(1);
  expect((await waitForRun(parent)).status).toBe("cancelled");
});

it("cancels the children it waits on as its runtime limit passes, while its own call is still in flight", async () => {
  await simReset();
  await setFaults([{ point: "provider.after", tool: "sim_find_email", play: "test-child-beside-call", hold: true }]);
  const input = { tool: "sim_find_email", input: { name: "Beside Child Limit", domain: "cancel.test" }, n: 2 };
  // Long enough for the child to start first, however loaded the machine.
  const parent = await startRun("test-child-beside-call", input, { timeoutSeconds: 4, maxSpend: 10 });
  await injector().held(0);
  const [child] = await until(
    () => childrenOf(parent),
    (found) => found.length === 1 && found[0]!.status === "waiting",
    "the child to start and wait",
  );
  await until(
    () => runView(child!.runId),
    (run) => run.status === "cancelled",
    "the child to be cancelled",
  );
  expect((await runView(parent)).status).toBe("running");
  // Past its limit, a child whose cancel failed gets none of the parent's cap.
  expect(await env.RUN_COORDINATOR.getByName(parent).allotChildSpend("dev", child!.runId, 1, 1)).toEqual({
    micros: 0,
    wait: false,
    ended: true,
  });
  expect(await injector().release(0)).toBe(1);
  const run = await waitForRun(parent);
  expect(run.status).toBe("failed");
  expect(run.error.code).toBe("deadline_exceeded");
});

it("cancels a child whose start was under way as the cancel arrived, without waiting for its own wind-down", async () => {
  await simReset();
  await setFaults([
    // The child's start is held (its first listing in the org's directory) ...
    { point: "directory.sync", play: "test-leaf", hold: true, times: 1 },
    // ... and the parent's own call once answered: its wind-down cannot end.
    { point: "provider.after", tool: "sim_find_email", play: "test-child-beside-call", hold: true },
  ]);
  const n = Date.now() * 1000 + 7;
  const parent = await startRun("test-child-beside-call", {
    tool: "sim_find_email",
    input: { name: `Started ${n}`, domain: "cancel.test" },
    n,
  });
  await injector().held(0);
  await injector().held(1);
  await cancel(parent);
  // The start goes on after the cancel arrived, which cancelled the children bound by then: none.
  expect(await injector().release(0)).toBe(1);
  const [child] = await until(
    () => childrenOf(parent),
    (found) => found.length === 1,
    "the child to be listed",
  );
  // Bound after the cancel, it ran on until the parent had wound down.
  await until(
    () => runView(child!.runId),
    (run) => run.status === "cancelled",
    "the child to be cancelled",
  );
  expect((await runView(parent)).status).toBe("cancelling");
  expect(await injector().release(1)).toBe(1);
  expect((await waitForRun(parent)).status).toBe("cancelled");
});

/**
 * Starts test-return-beside-call, waits for its left call's hold and for its play to have ended (returned or thrown,
 * it logs `returning`), then cancels it: the answer shows the status the run ends with, not `cancelling`.
 */
async function cancelOnceEnded(): Promise<string> {
  const n = crypto.randomUUID().slice(0, 8);
  const runId = await startRun("test-return-beside-call", {
    left: { tool: "sim_find_email", input: { name: `Left ${n}`, domain: "cancel.test" } },
    awaited: { tool: "sim_verify_email", input: { email: `awaited-${n}@cancel.test` } },
  });
  await injector().held(0);
  await until(
    () => allEvents(runId),
    (events) => events.some((e) => e.type === "log.appended" && e.line === "returning"),
    "the play to end",
  );
  const cancelled = await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" });
  expect(cancelled.status).toBe(202);
  expect(cancelled.body.status).toBe("running");
  return runId;
}

it("ends as its play decided when a cancel comes after the play returned, while a call it left is in flight", async () => {
  await simReset();
  // Held once the provider answered: the play returns without it, and its end waits for the call.
  await setFaults([{ point: "provider.after", tool: "sim_find_email", play: "test-return-beside-call", hold: true }]);
  const runId = await cancelOnceEnded();
  expect((await runView(runId)).status).toBe("running");
  // Nor would it take a signal: it would end without it.
  const sent = await apiJson(`/v1/runs/${runId}/signals/late`, { method: "POST", json: { data: 1 } });
  expect(sent.status).toBe(409);
  expect(sent.body.error.code).toBe("run_finished");
  expect(await injector().release(0)).toBe(1);
  const run = await waitForRun(runId);
  expect(run.status).toBe("completed");
  expect(run.result).toEqual({ returned: true });
  // Both calls billed: the one left in flight too (find 1, verify 0.25).
  expect(run.usage.spend.total).toBe(1.25);
});

it("ends as its play decided when a cancel comes after the play failed and the invocation then dies before storing the end", async () => {
  await simReset();
  const play = "test-return-beside-call";
  await setFaults([
    // The call left in flight is held once the provider answered: the play has failed, its end waits for the call.
    { point: "provider.after", tool: "sim_find_email", play, hold: true, times: 1 },
    // The awaited call fails, retryable, at each of its attempts (4) in this invocation: the play throws it. A replay
    // would send it again, and it would succeed.
    { point: "provider.after", tool: "sim_verify_email", play, times: 4, error: { code: "provider_down", retryable: true } },
    // The left call's receipt, once released: the invocation dies before the end is carried out.
    { point: "receipt.complete", play, times: 1, crash: true },
  ]);
  const runId = await cancelOnceEnded();
  expect(await injector().release(0)).toBe(1);
  const run = await waitForRun(runId);
  expect((await faultState()).counts[2]).toBeGreaterThanOrEqual(1);
  // As the cancel was told: failed, not the play run again (calling the provider after the cancel) to another end.
  expect(run.status).toBe("failed");
  expect(run.error.code).toBe("provider_down");
});
