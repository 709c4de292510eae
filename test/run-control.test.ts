/**
 * Run control as a user meets it: cancel says it is cancelling, an ended run
 * shows no active rows, a rerun of a run still going is refused (not left
 * blocked for a lease time), a blocked map names the run holding its rows,
 * signals retried with one Idempotency-Key get the first answer, and list
 * cursors are checked.
 */
import { afterEach, describe, expect, it } from "vitest";
import { callRows, setSim, SIM_DEFAULTS, until } from "./chaos-helpers";
import { allEvents, apiJson, eventsOfType, simReset, startRun, waitForRun } from "./helpers";

afterEach(async () => {
  await setSim(SIM_DEFAULTS);
});

let unique = 0;
const tag = (name: string) => `${name}-${Date.now().toString(36)}-${unique++}`;

describe("cancel and rerun of a run still going", () => {
  it("refuses the rerun naming the run, answers cancelling, and once ended the rerun starts at once and completes", async () => {
    await simReset();
    await setSim({ latencyMs: 150 });
    const rows = callRows("Active", 120);
    const runId = await startRun("test-calls", { rows, dataset: "active" });
    await until(
      () => apiJson(`/v1/runs/${runId}`),
      (r) => r.body.progress.maps.active?.active > 0,
      "the run to compute rows",
    );

    const early = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST" });
    expect(early.status).toBe(409);
    expect(early.body.error).toMatchObject({ code: "run_active", details: { runId, status: "running" } });
    expect(early.body.error.message).toContain(runId);

    const cancel = await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" });
    expect(cancel.status).toBe(202);
    expect(cancel.body).toEqual({ runId, status: "cancelling" });
    const cancelled = await waitForRun(runId);
    expect(cancelled.status).toBe("cancelled");
    expect(cancelled.progress.maps.active.active).toBe(0);
    const events = await allEvents(runId);
    expect(events.at(-1)!.type).toBe("run.cancelled");
    expect(eventsOfType(events, "run.cancelled")[0]!.progress.active!.active).toBe(0);

    await setSim(SIM_DEFAULTS);
    const rerun = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST" });
    expect(rerun.status).toBe(202);
    const done = await waitForRun(rerun.body.runId);
    expect(done.status).toBe("completed");
    expect(done.result).toEqual({ total: 120, completed: 120, failed: 0 });
    const progress = (await allEvents(rerun.body.runId)).filter((e) => e.type === "map.progress");
    expect(progress.every((p) => p.blocked === 0)).toBe(true);
  });
});

describe("a blocked map", () => {
  it("names the run holding its rows and until when", async () => {
    await simReset();
    await setSim({ latencyMs: 300 });
    const rows = callRows("Held", 40);
    const holder = await startRun(
      "test-calls",
      { rows, dataset: "held" },
      { testPolicy: { rowLeaseTtlMs: 3_000, receiptLeaseTtlMs: 3_000 } },
    );
    await until(
      () => apiJson(`/v1/runs/${holder}`),
      (r) => r.body.progress.maps.held?.active > 0,
      "the first run to hold its rows",
    );
    const waiter = await startRun("test-calls", { rows, dataset: "held" });
    const blocked = await until(
      () => apiJson(`/v1/runs/${waiter}`),
      (r) => r.body.progress.maps.held?.blocked > 0,
      "the second run to find its rows blocked",
    );
    const map = blocked.body.progress.maps.held;
    expect(map.blockedBy.runId).toBe(holder);
    expect(Date.parse(map.blockedBy.until)).toBeGreaterThan(Date.parse(blocked.body.createdAt));
    expect((await waitForRun(holder)).status).toBe("completed");
    const done = await waitForRun(waiter);
    expect(done.status).toBe("completed");
    expect(done.progress.maps.held.blockedBy).toBeUndefined();
  });
});

describe("signals retried with one Idempotency-Key", () => {
  it("all get the first answer, even once the signal has ended the run", async () => {
    const key = tag("approve");
    const runId = await startRun("test-waits", { keys: [key] });
    await until(
      () => allEvents(runId),
      (events) => events.some((e) => e.type === "wait.started"),
      "the run to wait",
    );
    const headers = { "Idempotency-Key": tag("once") };
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => apiJson(`/v1/runs/${runId}/signals/${key}`, { method: "POST", json: { data: "yes" }, headers })),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(10).fill(202));
    expect(answers.filter((a) => a.body.duplicate === false)).toHaveLength(1);
    expect(answers.every((a) => a.body.consumed === true)).toBe(true);
    expect((await waitForRun(runId)).result).toEqual({ got: ["yes"] });
    const late = await apiJson(`/v1/runs/${runId}/signals/${key}`, { method: "POST", json: { data: "yes" }, headers });
    expect(late).toMatchObject({ status: 202, body: { duplicate: true, consumed: true, status: "completed" } });
  });
});

describe("listing runs", () => {
  it("refuses a cursor it did not give out, and follows its own", async () => {
    for (const cursor of ["garbage", btoa("12:not-a-run"), "%%%"]) {
      const res = await apiJson(`/v1/runs?cursor=${encodeURIComponent(cursor)}`);
      expect(res.status, cursor).toBe(400);
      expect(res.body.error.code).toBe("invalid_request");
    }
    await startRun("test-waits", { keys: [tag("list")] });
    await startRun("test-waits", { keys: [tag("list")] });
    const first = await apiJson("/v1/runs?limit=1");
    expect(first.body.nextCursor).toEqual(expect.any(String));
    const next = await apiJson(`/v1/runs?limit=1&cursor=${encodeURIComponent(first.body.nextCursor)}`);
    expect(next.status).toBe(200);
    expect(next.body.runs[0].runId).not.toBe(first.body.runs[0].runId);
  });
});
