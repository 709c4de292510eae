/**
 * A capped parent counts what its children spent, from their ends. Bills
 * that reach a child after its end (an attempt the child's coordinator gave
 * up on reports at last) are told to the parent again, or the parent could
 * spend that room twice.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { AttemptReport } from "../src/contracts/executors";
import { clearFaults, faultState, setFaults, until } from "./chaos-helpers";
import { apiJson, simReset, waitForRun } from "./helpers";

/** What the run's coordinator counts of each child's spend (its allotment, or what it spent once ended). */
function childSpend(runId: string): Promise<{ child: string; micros: number; ended: number }[]> {
  return runInDurableObject(env.RUN_COORDINATOR.getByName(runId), (_object: unknown, state: DurableObjectState) =>
    state.storage.sql
      .exec<{ child: string; micros: number; ended: number }>(
        "SELECT child_run_id AS child, micros, ended FROM child_spend ORDER BY child_run_id",
      )
      .toArray(),
  );
}

/** A report from an attempt of `runId` given up on: one bill of `credits`, nothing else. */
function lateReport(runId: string, reporter: string, requestKey: string, credits: number): AttemptReport {
  return {
    executor: "late-executor",
    attemptId: `${runId}/late`,
    reporter,
    seq: 1,
    map: "leads",
    chunk: 0,
    rows: { started: 0, completed: 0, failed: 0, stopped: 0 },
    logs: [],
    bills: [{ requestKey, toolId: "sim_find_email", provider: "sim", credits }],
    salvage: [],
    usage: { rpc: 0, provider: 0, retries: 0, rateLimited: 0, lookups: 0, outcomeUnknown: 0, rpcByKind: {} },
    latency: [],
    waiting: [],
    draining: false,
    end: null,
  } as AttemptReport;
}

describe("a child's bills that come after its end", () => {
  it("are told to its capped parent, which counts them once, however often they are told", async () => {
    await simReset();
    const domain = `late-${crypto.randomUUID().slice(0, 8)}.test`;
    const accounts = [0, 1].map((a) => ({ id: `late${a}`, domain, people: [`Late ${a} A`, `Late ${a} B`] }));
    const started = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-accounts", input: { accounts }, maxSpend: 100 } });
    expect(started.status).toBe(202);
    const parent = await waitForRun(started.body.runId, { timeoutMs: 60_000 });
    expect(parent.status).toBe("completed");
    const before = await childSpend(parent.runId);
    // Two children, each two people of a find (1 credit) and a verify (0.25), ended.
    expect(before).toEqual([
      expect.objectContaining({ micros: 2_500_000, ended: 1 }),
      expect.objectContaining({ micros: 2_500_000, ended: 1 }),
    ]);
    const child = before[0]!.child;

    await env.RUN_COORDINATOR.getByName(child).attemptReport(lateReport(child, "late-reporter", "late-bill-1", 1));
    const after = await until(
      () => childSpend(parent.runId),
      (rows) => rows.find((row) => row.child === child)!.micros !== 2_500_000,
      "the parent to count the child's late bill",
    );
    expect(after.find((row) => row.child === child)).toEqual({ child, micros: 3_500_000, ended: 1 });

    // The same bill again (a report resent, or carried by another reporter) is counted nowhere twice.
    await env.RUN_COORDINATOR.getByName(child).attemptReport(lateReport(child, "late-reporter", "late-bill-1", 1));
    await env.RUN_COORDINATOR.getByName(child).attemptReport(lateReport(child, "other-reporter", "late-bill-1", 1));
    // A second, new bill is counted: once it is, the repeats above have long been applied (one alarm tells both).
    await env.RUN_COORDINATOR.getByName(child).attemptReport(lateReport(child, "third-reporter", "late-bill-2", 0.25));
    const last = await until(
      () => childSpend(parent.runId),
      (rows) => rows.find((row) => row.child === child)!.micros !== 3_500_000,
      "the parent to count the second late bill",
    );
    expect(last).toEqual(
      [...before.map((row) => (row.child === child ? { child, micros: 3_750_000, ended: 1 } : row))].sort((a, b) =>
        a.child.localeCompare(b.child),
      ),
    );
  });

  it("are told again when the first telling fails: nothing else would tell the parent", async () => {
    await simReset();
    const domain = `retell-${crypto.randomUUID().slice(0, 8)}.test`;
    const accounts = [0, 1].map((a) => ({ id: `retell${a}`, domain, people: [`Retell ${a} A`, `Retell ${a} B`] }));
    const started = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-accounts", input: { accounts }, maxSpend: 100 } });
    const parent = await waitForRun(started.body.runId, { timeoutMs: 60_000 });
    expect(parent.status).toBe("completed");
    const [first] = await childSpend(parent.runId);
    const child = first!.child;
    try {
      // The child's first telling of its grown spend fails.
      await setFaults([{ point: "child.finished", times: 1 }]);
      await env.RUN_COORDINATOR.getByName(child).attemptReport(lateReport(child, "retell-reporter", "retell-bill", 1));
      const after = await until(
        () => childSpend(parent.runId),
        (rows) => rows.find((row) => row.child === child)!.micros !== 2_500_000,
        "the parent to be told the child's late bill again",
      );
      expect(after.find((row) => row.child === child)).toEqual({ child, micros: 3_500_000, ended: 1 });
      expect((await faultState()).counts).toEqual([2]);
    } finally {
      await clearFaults();
    }
  });

  it("replace its allotment in a parent its end could not be told at first: the parent's ask learns the end, not the spend", async () => {
    await simReset();
    const domain = `untold-${crypto.randomUUID().slice(0, 8)}.test`;
    const accounts = [0, 1].map((a) => ({ id: `untold${a}`, domain, people: [`Untold ${a} A`, `Untold ${a} B`] }));
    try {
      // The first child to end cannot tell its parent: the parent's alarm asks it, and goes on.
      await setFaults([{ point: "child.finished", times: 1 }]);
      const started = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-accounts", input: { accounts }, maxSpend: 100 } });
      const parent = await waitForRun(started.body.runId, { timeoutMs: 60_000 });
      expect(parent.status).toBe("completed");
      // Each child's allotment (half the cap's room, tens of credits) gives way to what it spent.
      const spend = await until(
        () => childSpend(parent.runId),
        (rows) => rows.every((row) => row.ended === 1),
        "the parent to count what every child spent",
      );
      expect(spend).toEqual([
        expect.objectContaining({ micros: 2_500_000, ended: 1 }),
        expect.objectContaining({ micros: 2_500_000, ended: 1 }),
      ]);
    } finally {
      await clearFaults();
    }
  });
});
