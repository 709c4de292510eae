/**
 * A wake (a signal, a child's end) that arrives at any point of an alarm
 * invocation leads to another invocation. These tests hold the invocation
 * on purpose between driving the run and arming its next alarm (a `hold`
 * fault at `run.alarm`), deliver the wake there, then let it go on.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import type { RunCoordinator } from "../src/actors/RunCoordinator";
import { afterEach, describe, expect, it } from "vitest";
import { clearFaults, setFaults, until } from "./chaos-helpers";
import { allEvents, apiJson, eventsOfType, startRun, waitForRun } from "./helpers";

let unique = 0;
const tag = (name: string) => `${name}-${Date.now().toString(36)}-${unique++}`;
const faults = () => env.FAULTS!.getByName("faults");

const signal = (runId: string, eventKey: string, data: unknown) =>
  apiJson(`/v1/runs/${runId}/signals/${eventKey}`, { method: "POST", json: { data } });

afterEach(async () => {
  await faults().release(0);
  await clearFaults();
});

describe("a wake between driving and re-arming", () => {
  it("from two signals is not lost: the run takes both and completes", async () => {
    await setFaults([{ point: "run.alarm", play: "test-waits", hold: true, times: 1 }]);
    const [x, y] = [tag("x"), tag("y")];
    const runId = await startRun("test-waits", { keys: [x, y], parallel: true });
    // The first invocation parked the run on both waits and is held before it arms its alarm.
    await faults().held(0);
    expect((await signal(runId, y, { n: 2 })).body.consumed).toBe(true);
    expect((await signal(runId, x, { n: 1 })).body.consumed).toBe(true);
    expect(await faults().release(0)).toBe(1);
    // The run's only other alarm is its 24 h limit: it ends now only if the wake was kept.
    const run = await waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ got: [{ n: 1 }, { n: 2 }] });
  });

  it("from a child's end is not lost: the parent completes without asking the child", async () => {
    await setFaults([{ point: "run.alarm", play: "test-parent", hold: true, times: 1 }]);
    const n = 1000 + unique++;
    // The parent asks a silent child only once an hour here: only childFinished can wake it in time.
    const parentId = await startRun(
      "test-parent",
      { leaf: { n, waitForSignal: true } },
      { testPolicy: { childCheckIntervalMs: 3_600_000 } },
    );
    await faults().held(0);
    const started = eventsOfType(await allEvents(parentId), "child.started")[0];
    expect(started).toBeDefined();
    const childId = started!.childRunId;
    // Taken now if the child waits already, else kept for its wait: either way it goes on (a second signal, sent once
    // the first was kept and taken, would find the child ended).
    expect((await signal(childId, "go", null)).status).toBe(202);
    expect((await waitForRun(childId, { timeoutMs: 20_000 })).status).toBe("completed");
    // The child has told its parent while the parent's invocation is still held.
    await until(
      () => allEvents(parentId),
      (events) => events.some((e) => e.type === "child.finished"),
      "the parent to hear of its child's end",
    );
    expect(await faults().release(0)).toBe(1);
    const parent = await waitForRun(parentId, { timeoutMs: 20_000 });
    expect(parent.status).toBe("completed");
    expect(parent.result).toEqual({ first: { n, doubled: 2 * n }, second: null });
  });
});

describe("a cancel asked for while an invocation runs", () => {
  it("shows the run cancelling in the org's list and in a signal's refusal, until it ends cancelled", async () => {
    await setFaults([{ point: "run.alarm", play: "test-waits", hold: true, times: 1 }]);
    const runId = await startRun("test-waits", { keys: [tag("c")] });
    await faults().held(0);
    expect((await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" })).status).toBe(202);
    const listed = async () => (await apiJson("/v1/runs?limit=200")).body.runs.find((r: { runId: string }) => r.runId === runId);
    expect(await listed()).toMatchObject({ status: "cancelling" });
    // A signal would be taken and the run end without it: refused, naming the status.
    const refused = await signal(runId, tag("other"), { n: 1 });
    expect(refused.status).toBe(409);
    expect(refused.body.error.message).toContain("is cancelling");
    expect(await faults().release(0)).toBe(1);
    expect((await waitForRun(runId, { timeoutMs: 20_000 })).status).toBe("cancelled");
    expect(await listed()).toMatchObject({ status: "cancelled" });
  });
});

describe("an alarm that keeps failing", () => {
  /** A test-waits run waiting on its one key. */
  const waitingRun = async (key: string) => {
    const runId = await startRun("test-waits", { keys: [key] });
    await until(
      () => allEvents(runId),
      (events) => events.some((e) => e.type === "wait.started"),
      "the run to wait",
    );
    return runId;
  };

  /**
   * Runs the run's alarm as the platform's last retry of a failed one, failing again; answers the alarm then set.
   * First waits for the run's own invocations to be over (none under way, none due within a minute): one under
   * way would take the fault, or make this one return at once, as it does when the platform starts an alarm while
   * one still runs.
   */
  const failLastRetry = async (runId: string) => {
    const coordinator = env.RUN_COORDINATOR.getByName(runId);
    await until(
      () =>
        runInDurableObject(coordinator, async (instance: RunCoordinator, state) => {
          const alarm = await state.storage.getAlarm();
          return !instance.invoking && (alarm === null || alarm > Date.now() + 60_000);
        }),
      (idle) => idle,
      "the run's invocations to be over",
    );
    await setFaults([{ point: "run.alarm", play: "test-waits", times: 1 }]);
    return runInDurableObject(coordinator, async (instance: RunCoordinator, state) => {
      await state.storage.deleteAlarm();
      await expect(instance.alarm({ retryCount: 6, isRetry: true, scheduledTime: Date.now() })).rejects.toThrow(/run.alarm/);
      return state.storage.getAlarm();
    });
  };

  it("leaves a run that has not ended an alarm of its own once the platform's retries run out", async () => {
    const key = tag("late");
    const runId = await waitingRun(key);
    // The platform's last retry of a failed alarm (the directory was down for two minutes, say) fails too.
    const armed = await failLastRetry(runId);
    // Without one, the run would never wake, time out or meet its deadline.
    expect(armed).toBeGreaterThan(Date.now());
    expect((await signal(runId, key, { n: 1 })).body.consumed).toBe(true);
    expect((await waitForRun(runId, { timeoutMs: 20_000 })).status).toBe("completed");
  });

  it("ends a run whose invocation at the platform's last retry is killed before it re-arms", async () => {
    const key = tag("killed");
    // Its wait times out in 8 s (the play then returns): only an alarm can end it.
    const runId = await startRun("test-waits", { keys: [key], timeoutMs: 8_000, catchTimeout: true });
    const coordinator = env.RUN_COORDINATOR.getByName(runId);
    await until(
      () =>
        runInDurableObject(coordinator, async (instance: RunCoordinator, state) => {
          const alarm = await state.storage.getAlarm();
          return !instance.invoking && alarm !== null && alarm > Date.now() + 2_000;
        }),
      (parked) => parked,
      "the run to wait, its alarm at the wait's timeout",
    );
    await setFaults([{ point: "run.alarm", play: "test-waits", times: 1, crash: true }]);
    // The platform's last retry (its alarm is no longer set), killed before its finally re-arms (CPU, memory, wall clock).
    await runInDurableObject(coordinator, async (instance: RunCoordinator, state) => {
      await state.storage.deleteAlarm();
      await instance.alarm({ retryCount: 6, isRetry: true, scheduledTime: Date.now() });
    }).then(
      () => expect.unreachable("the invocation was not killed"),
      (error: unknown) => expect(String(error)).toContain("crashed the invocation at run.alarm"),
    );
    // Read without GET /v1/runs/<id>, which would arm the alarm of a run that has none.
    const events = await until(
      () => allEvents(runId),
      (all) => all.some((e) => e.type === "run.completed"),
      "the run to end by its alarms alone",
      20_000,
    );
    expect(eventsOfType(events, "run.completed")[0]!.result).toMatchObject({ timedOut: "event_timeout" });
    // Ended, it is left no alarm: no watchdog goes on arming another.
    await until(
      () =>
        runInDurableObject(env.RUN_COORDINATOR.getByName(runId), async (instance: RunCoordinator, state) =>
          instance.invoking ? "invoking" : state.storage.getAlarm(),
        ),
      (alarm) => alarm === null,
      "the ended run's alarm to be cleared",
      5_000,
    );
  });

  it("leaves an ended run an alarm too, for what its end still has to tell (the org's directory and spend, its parents)", async () => {
    const runId = await waitingRun(tag("ended"));
    await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" });
    expect((await waitForRun(runId)).status).toBe("cancelled");
    expect(await failLastRetry(runId)).toBeGreaterThan(Date.now());
  });
});
