import { abortAllDurableObjects, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { MAX_OPEN_SIGNALS, type RunCoordinator } from "../src/actors/RunCoordinator";
import { describe, expect, it } from "vitest";
import type { LiveMessage } from "../src/client/index";
import { RunProgress } from "../src/cli/progress";
import { clearFaults, setFaults, until } from "./chaos-helpers";
import { allEvents, api, apiJson, eventsOfType, expectedEmail, startRun, waitForRun } from "./helpers";

let unique = 0;
const tag = (name: string) => `${name}-${Date.now().toString(36)}-${unique++}`;

/** Polls until the run's status is `status` (the coordinator's alarm drives it meanwhile). */
async function waitForStatus(runId: string, status: string, timeoutMs = 20_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { body } = await apiJson(`/v1/runs/${runId}`);
    if (body.status === status) return body;
    if (["completed", "failed", "cancelled"].includes(body.status) || Date.now() > deadline)
      throw new Error(`run ${runId} is ${body.status}, not ${status}: ${JSON.stringify(body.error)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Polls until the run's journal holds a waiting entry for the signal `eventKey`. */
async function waitForWaitOn(runId: string, eventKey: string): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    const events = await allEvents(runId);
    if (events.some((e) => e.type === "wait.started" && e.eventKey === eventKey)) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`run ${runId} never waited on ${eventKey}`);
}

const signal = (runId: string, eventKey: string, body: unknown, init: { token?: string; headers?: Record<string, string> } = {}) =>
  apiJson(`/v1/runs/${runId}/signals/${eventKey}`, { method: "POST", json: body, ...init });

async function alarmOf(runId: string): Promise<number | null> {
  return runInDurableObject(env.RUN_COORDINATOR.getByName(runId), (_instance, state) => state.storage.getAlarm());
}

/**
 * The alarm a parked run settles on, once it is later than `after`. The
 * invocation that wrote `waiting` arms it as its last step, after its last
 * await, so a read in between sees none yet; and a read of the run that lands
 * while an alarm handler starts (its alarm consumed, no invocation yet) arms
 * one at once, so one more invocation may replay the play and park again
 * first. A run that polled would never settle: the wait times out.
 */
async function parkedAlarmOf(runId: string, after: number): Promise<number> {
  const settled = (alarm: number | null) => alarm !== null && alarm > after;
  return (await until(() => alarmOf(runId), settled, `run ${runId} parked with its alarm after ${after}`))!;
}

describe("ctx.waitForEvent", () => {
  it("demo-approval waits (status waiting, its one alarm at the run's limit) until the approve signal arrives", async () => {
    const message = tag("please approve");
    const runId = await startRun("demo-approval", { message });
    const waiting = await waitForStatus(runId, "waiting");
    expect(waiting.result).toBeNull();
    // No timer and no polling: the only alarm is the run's runtime limit, a day away.
    expect(await parkedAlarmOf(runId, Date.now() + 23 * 3600 * 1000)).toBeLessThanOrEqual(Date.now() + 24 * 3600 * 1000);
    const listed = (await apiJson("/v1/runs?limit=200")).body.runs.find((r: any) => r.runId === runId);
    expect(listed.status).toBe("waiting");

    const sent = await signal(runId, "approve", { data: { by: "ada", ok: true } });
    expect(sent.status).toBe(202);
    expect(sent.body).toMatchObject({ runId, eventKey: "approve", consumed: true, duplicate: false });
    const run = await waitForRun(runId);
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ approved: { by: "ada", ok: true } });
    const logs = (await allEvents(runId)).filter((e) => e.type === "log.appended").map((e) => e.line);
    expect(logs.filter((line) => line === message)).toHaveLength(1);
  });

  it("keeps a signal sent before the wait starts, and the wait takes it", async () => {
    const [a, b] = [tag("first"), tag("second")];
    const runId = await startRun("test-waits", { keys: [a, b] });
    await waitForWaitOn(runId, a);
    // b arrives while the play still waits on a: it is kept.
    const early = await signal(runId, b, { data: "bee" });
    expect(early.body).toMatchObject({ consumed: false, status: "waiting" });
    expect((await signal(runId, a, { data: "ay" })).body.consumed).toBe(true);
    const run = await waitForRun(runId);
    expect(run.result).toEqual({ got: ["ay", "bee"] });
  });

  it("waits on two keys at once and returns each signal's data to its own wait", async () => {
    const [x, y] = [tag("x"), tag("y")];
    const runId = await startRun("test-waits", { keys: [x, y], parallel: true });
    await waitForWaitOn(runId, y);
    expect((await signal(runId, y, { data: { n: 2 } })).body.consumed).toBe(true);
    expect((await apiJson(`/v1/runs/${runId}`)).body.status).not.toBe("completed");
    expect((await signal(runId, x, { data: { n: 1 } })).body.consumed).toBe(true);
    const run = await waitForRun(runId);
    expect(run.result).toEqual({ got: [{ n: 1 }, { n: 2 }] });
  });

  it("throws a clear timeout error into the play when no signal comes in time", async () => {
    const key = tag("never");
    const failed = await waitForRun(await startRun("test-waits", { keys: [key], timeoutMs: 300 }));
    expect(failed.status).toBe("failed");
    expect(failed.error).toMatchObject({ code: "event_timeout", message: `ctx.waitForEvent("${key}") got no signal within 300 ms` });
    const caught = await waitForRun(await startRun("test-waits", { keys: [tag("never")], timeoutMs: 300, catchTimeout: true }));
    expect(caught.status).toBe("completed");
    expect(caught.result.timedOut).toBe("event_timeout");
  });

  it("survives eviction while waiting: the signal that comes after wakes the run", async () => {
    const runId = await startRun("demo-approval", { message: tag("evict me") });
    await waitForStatus(runId, "waiting");
    await evictDurableObject(env.RUN_COORDINATOR.getByName(runId));
    await abortAllDurableObjects();
    expect((await signal(runId, "approve", { data: "yes" })).body.consumed).toBe(true);
    const run = await waitForRun(runId);
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ approved: "yes" });
  });

  it("validates signals: the key, the body, the org, a finished run, and repeats with an Idempotency-Key", async () => {
    const runId = await startRun("test-waits", { keys: [tag("k"), tag("never-sent")] });
    await waitForStatus(runId, "waiting");
    expect((await signal(runId, "bad key!", { data: 1 })).body.error.code).toBe("invalid_request");
    expect((await signal(runId, "ok", { value: 1 })).status).toBe(400);
    expect((await signal(runId, "ok", { data: 1, extra: true })).status).toBe(400);
    const raw = await api(`/v1/runs/${runId}/signals/ok`, {
      method: "POST",
      body: "{not json",
      headers: { "Content-Type": "application/json" },
    });
    expect(raw.status).toBe(400);
    expect((await signal(runId, "ok", { data: "x".repeat(70_000) })).status).toBe(400);
    expect((await signal(runId, "ok", { data: 1 }, { token: "other-token" })).status).toBe(404);
    expect((await signal("run_0123456789abcdef0123456789abcdef", "ok", { data: 1 })).status).toBe(404);
    expect((await signal("not-a-run", "ok", { data: 1 })).status).toBe(404);

    const once = { headers: { "Idempotency-Key": tag("signal") } };
    expect((await signal(runId, "spare", { data: 1 }, once)).body).toMatchObject({ duplicate: false });
    expect((await signal(runId, "spare", { data: 1 }, once)).body).toMatchObject({ duplicate: true });
    // The same data with its keys in another order (another client's JSON) is the same signal.
    const keyed = { headers: { "Idempotency-Key": tag("signal") } };
    expect((await signal(runId, "spare", { data: { a: 1, b: [2, 3] } }, keyed)).body).toMatchObject({ duplicate: false });
    expect((await signal(runId, "spare", { data: { b: [2, 3], a: 1 } }, keyed)).body).toMatchObject({ duplicate: true });
    expect((await signal(runId, "spare", { data: { b: [3, 2], a: 1 } }, keyed)).status).toBe(409);
    expect((await allEvents(runId)).filter((e) => e.type === "signal.received" && e.eventKey === "spare")).toHaveLength(2);
    // The key again with another signal is not that signal repeated: it was answered "consumed, duplicate" and dropped.
    for (const [key, data] of [
      ["other", 1],
      ["spare", 2],
    ] as const) {
      const reused = await signal(runId, key, { data }, once);
      expect(reused.status, key).toBe(409);
      expect(reused.body.error.code).toBe("idempotency_key_reused");
    }

    await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" });
    expect((await waitForRun(runId)).status).toBe("cancelled");
    const late = await signal(runId, "ok", { data: 1 });
    expect(late.status).toBe(409);
    expect(late.body.error.code).toBe("run_finished");
  });
});

describe("a play that catches every error around its wait", () => {
  it("does not run its fallback while the signal has not come: one call, and the log says what was decided", async () => {
    const key = tag("decide");
    const runId = await startRun("test-wait-fallback", { key, timeoutMs: 60_000 });
    await waitForStatus(runId, "waiting");
    expect((await signal(runId, key, { data: { ok: true } })).body).toMatchObject({ consumed: true });
    const run = await waitForRun(runId);
    expect(run.result).toEqual({ ok: true, email: expectedEmail("Approved Person", `${key}.test`) });
    // A catch-all that took the park for a failure would log "decided no" (its replay's "decided yes" then skipped as
    // already logged) and bill the rejection's call beside the approval's.
    const logs = eventsOfType(await allEvents(runId), "log.appended").map((e) => e.line);
    expect(logs.filter((line) => line.startsWith("decided"))).toEqual(["decided yes"]);
    expect(run.usage.providerRequests).toBe(1);
  });

  it("runs its fallback once the wait has really failed", async () => {
    const key = tag("silent");
    const run = await waitForRun(await startRun("test-wait-fallback", { key, timeoutMs: 300 }));
    expect(run.result).toEqual({ ok: false, email: expectedEmail("Rejected Person", `${key}.test`) });
    const logs = eventsOfType(await allEvents(run.runId), "log.appended").map((e) => e.line);
    expect(logs.filter((line) => line.startsWith("decided"))).toEqual(["decided no"]);
    expect(run.usage.providerRequests).toBe(1);
  });
});

describe("a run that is ending", () => {
  it("refuses a signal (409) while it is cancelled, rather than taking it and ending without it", async () => {
    const runId = await startRun("demo-approval", { message: tag("cancel me") });
    await waitForWaitOn(runId, "approve");
    // Hold the run between the end its cancel decided and the end itself.
    await setFaults([{ point: "run.finish", hold: true, times: 1, play: "demo-approval" }]);
    const faults = env.FAULTS!.getByName("faults");
    try {
      expect((await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" })).status).toBe(202);
      await faults.held(0);
      const sent = await signal(runId, "approve", { data: { ok: true } });
      expect(sent.status).toBe(409);
      expect(sent.body.error).toMatchObject({ code: "run_finished" });
      expect(sent.body.error.message).toContain("cancelling");
    } finally {
      await faults.release(0);
      await clearFaults();
    }
    expect((await waitForRun(runId)).status).toBe("cancelled");
    expect((await allEvents(runId)).some((e) => e.type === "signal.received")).toBe(false);
  });

  it("refuses a signal (409) once past its runtime limit, though the alarm that fails it comes late", async () => {
    const key = tag("past-limit");
    // Long enough for the run to park and its alarm to be taken away before the limit, however loaded the machine.
    const runId = await startRun("test-waits", { keys: [key] }, { timeoutSeconds: 3 });
    await waitForStatus(runId, "waiting");
    const coordinator = env.RUN_COORDINATOR.getByName(runId);
    const { deadlineAt } = await runInDurableObject(coordinator, (_instance: unknown, state: DurableObjectState) =>
      state.storage.sql.exec<{ deadlineAt: number }>("SELECT deadline_at AS deadlineAt FROM run").one(),
    );
    // Its alarm at the limit comes late (a busy machine, alarm retries): the signal arrives first, past the limit.
    await parkedAlarmOf(runId, deadlineAt - 1);
    await runInDurableObject(coordinator, (_instance: unknown, state: DurableObjectState) => state.storage.deleteAlarm());
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, deadlineAt - Date.now()) + 200));
    const sent = await signal(runId, key, { data: "too late" });
    expect(sent.status).toBe(409);
    expect(sent.body.error).toMatchObject({ code: "run_finished" });
    // Its status still says waiting: the refusal says why (it said "is waiting; signals go to runs ... waiting").
    expect(sent.body.error.message).toBe(
      `run ${runId} is past its runtime limit (timeoutSeconds) and is being stopped; signals go to runs that are still running or waiting`,
    );
    await runInDurableObject(coordinator, (_instance: unknown, state: DurableObjectState) => state.storage.setAlarm(Date.now()));
    expect((await waitForRun(runId)).error).toMatchObject({ code: "deadline_exceeded" });
    expect((await allEvents(runId)).some((e) => e.type === "signal.received")).toBe(false);
  });

  it("ends as it decided when a cancel comes while it carries out that end, and the cancel says so", async () => {
    const runId = await startRun("demo-approval", { message: tag("approved then cancelled") });
    await waitForWaitOn(runId, "approve");
    // Hold the run between the end its play decided (completed) and the end itself.
    await setFaults([{ point: "run.finish", hold: true, times: 1, play: "demo-approval" }]);
    const faults = env.FAULTS!.getByName("faults");
    let cancelled: { status: number; body: any };
    try {
      expect((await signal(runId, "approve", { data: { ok: true } })).status).toBe(202);
      await faults.held(0);
      // Shown running while its end is carried out: the refusal says it is ending (it said "is running; ... running").
      const late = await signal(runId, "approve", { data: { ok: false } });
      expect(late.status).toBe(409);
      expect(late.body.error).toMatchObject({
        code: "run_finished",
        message: `run ${runId} is ending (its play has finished); signals go to runs that are still running or waiting`,
      });
      cancelled = await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" });
      expect((await apiJson(`/v1/runs/${runId}`)).body.status).not.toBe("cancelling");
    } finally {
      await faults.release(0);
      await clearFaults();
    }
    expect(cancelled.status).toBe(202);
    expect(cancelled.body.status).not.toBe("cancelling");
    expect((await waitForRun(runId)).status).toBe("completed");
  });

  it("is rerun under its runtime limit, not the default day", async () => {
    const runId = await startRun("demo-approval", { message: tag("limited") }, { timeoutSeconds: 1 });
    const first = await waitForRun(runId);
    expect(first.error).toMatchObject({ code: "deadline_exceeded" });
    const rerun = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST" });
    expect(rerun.status).toBe(202);
    expect((await waitForRun(rerun.body.runId)).error).toMatchObject({ code: "deadline_exceeded" });
    // A limit of its own: taken (the contract refused it).
    const own = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST", json: { timeoutSeconds: 2 } });
    expect(own.status).toBe(202);
    expect((await waitForRun(own.body.runId)).error).toMatchObject({ code: "deadline_exceeded" });
  });
});

describe("a signal's wait", () => {
  it("is not one whose timeout has passed: a signal arriving after it is kept, and the wait fails event_timeout", async () => {
    const key = tag("late");
    // Long enough that its alarm is taken away below before it comes, on a loaded machine too.
    const runId = await startRun("test-waits", { keys: [key], timeoutMs: 1_500, catchTimeout: true });
    await waitForStatus(runId, "waiting");
    const coordinator = env.RUN_COORDINATOR.getByName(runId);
    const { dueAt } = eventsOfType(await allEvents(runId), "wait.started")[0]!;
    // Its alarm at the timeout comes late (a busy machine, alarm retries): the signal arrives first, past the timeout.
    // The alarm is taken away once the invocation that parked the run has armed it (it may still run after `waiting`).
    await parkedAlarmOf(runId, Date.parse(dueAt!) - 1);
    await runInDurableObject(coordinator, (_instance: unknown, state: DurableObjectState) => state.storage.deleteAlarm());
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, Date.parse(dueAt!) - Date.now()) + 200));
    expect((await signal(runId, key, { data: "too late" })).body).toMatchObject({ consumed: false });
    await runInDurableObject(coordinator, (_instance: unknown, state: DurableObjectState) => state.storage.setAlarm(Date.now()));
    const run = await waitForRun(runId);
    expect(run.result).toMatchObject({ timedOut: "event_timeout" });
  });

  it("is still handed its signal when the run keeps as many signals no wait took as it may; others are refused", async () => {
    const key = tag("w");
    const runId = await startRun("test-waits", { keys: [key] });
    await waitForStatus(runId, "waiting");
    // A sender posting to keys the play never waits on: each was kept, 64 KiB and a ledger event apiece, for ever.
    const last = await runInDurableObject(env.RUN_COORDINATOR.getByName(runId), async (instance: RunCoordinator) => {
      for (let i = 0; i < MAX_OPEN_SIGNALS; i++) await instance.signal("dev", `unheard-${i % 7}`, i, null);
      return instance.signal("dev", "unheard-0", "one more", null);
    });
    expect(last).toEqual({ outcome: "full", open: MAX_OPEN_SIGNALS });
    const refused = await signal(runId, "unheard-1", { data: 1 });
    expect(refused.status).toBe(409);
    expect(refused.body.error).toMatchObject({ code: "too_many_signals", details: { open: MAX_OPEN_SIGNALS } });
    expect((await signal(runId, key, { data: "go" })).body).toMatchObject({ consumed: true });
    expect((await waitForRun(runId)).status).toBe("completed");
  });

  it("of twelve on one key at once takes the signals in the order the play opened them", async () => {
    const key = tag("vote");
    const runId = await startRun("test-waits", { keys: Array(12).fill(key), parallel: true });
    await waitForStatus(runId, "waiting");
    for (let n = 0; n < 12; n++) expect((await signal(runId, key, { data: n })).body).toMatchObject({ consumed: true });
    expect((await waitForRun(runId)).result).toEqual({ got: [...Array(12).keys()] });
  });
});

describe("the CLI watching a run that waits on two keys", () => {
  it("shows it waiting while one wait is still open after the other took its signal, from a snapshot at any point", async () => {
    const [a, b] = [tag("cli-a"), tag("cli-b")];
    const runId = await startRun("test-waits", { keys: [a, b], parallel: true });
    await until(
      () => allEvents(runId),
      (events) => eventsOfType(events, "wait.started").length === 2,
      "both waits to start",
    );
    expect((await signal(runId, a, { data: 1 })).body).toMatchObject({ consumed: true });
    // The run wakes, replays, and parks again on b (no event says so).
    const events = await allEvents(runId);
    const run = (await apiJson(`/v1/runs/${runId}`)).body;
    // A watch gets the snapshot first, then the ledger from its start: the snapshot taken before any event, or after
    // the waits started.
    for (const at of [0, eventsOfType(events, "wait.started")[1]!.seq]) {
      const progress = new RunProgress(runId);
      progress.apply({ type: "snapshot", run: { ...run, status: at === 0 ? "queued" : "waiting" }, seq: at });
      for (const event of events) progress.apply(event as LiveMessage);
      expect(progress.status).toBe("waiting");
    }
    expect((await signal(runId, b, { data: 2 })).body).toMatchObject({ consumed: true });
    const progress = new RunProgress(runId);
    progress.apply({ type: "snapshot", run: { ...run, status: "queued" }, seq: 0 });
    for (const event of await allEvents(runId)) progress.apply(event as LiveMessage);
    expect(["running", "completed"]).toContain(progress.status);
    expect((await waitForRun(runId)).result).toEqual({ got: [1, 2] });
  });
});

describe("ctx.sleep", () => {
  it("sleeps on the alarm across an eviction and goes on exactly once", async () => {
    const name = tag("nap");
    // Two seconds: long enough that the eviction below lands during the sleep, even on a loaded machine.
    const runId = await startRun("test-sleep", { ms: 2000, tag: name });
    await waitForStatus(runId, "waiting");
    expect(await parkedAlarmOf(runId, Date.now())).toBeLessThan(Date.now() + 60_000);
    await evictDurableObject(env.RUN_COORDINATOR.getByName(runId));
    const run = await waitForRun(runId);
    expect(run.status).toBe("completed");
    expect(run.result).toEqual({ slept: 2000 });
    const events = await allEvents(runId);
    const logs = events.filter((e) => e.type === "log.appended").map((e) => e.line);
    expect(logs.filter((line) => line === `after sleep ${name}`)).toHaveLength(1);
    // Play-level log lines are not repeated by a replay either.
    expect(logs.filter((line) => line === `before sleep ${name}`)).toHaveLength(1);
    expect(events.filter((e) => e.type === "wait.finished" && e.kind === "sleep")).toHaveLength(1);
  });
});
