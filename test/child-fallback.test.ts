import { describe, expect, it } from "vitest";
import { until } from "./chaos-helpers";
import { allEvents, apiJson, datasetRows, eventsOfType, expectedEmail, runView, startRun, waitForRun } from "./helpers";

let unique = 0;
/** A number no other test uses: child identities are shared by the whole org. */
const uniqueN = () => Date.now() * 1000 + unique++;
const domain = () => `fallback-${uniqueN()}.test`;

/** The org's runs whose parent is `parentRunId`. */
async function childrenOf(parentRunId: string): Promise<any[]> {
  const { body } = await apiJson("/v1/runs?limit=200");
  return body.runs.filter((r: any) => r.parentRunId === parentRunId);
}

/** The lines the play logged about its child. */
async function childLines(runId: string): Promise<string[]> {
  return eventsOfType(await allEvents(runId), "log.appended")
    .map((e) => e.line)
    .filter((line) => line.startsWith("child "));
}

describe("a play that catches every error around its child", () => {
  for (const tryCatch of [false, true]) {
    it(`does not run its fallback while the child still runs (${tryCatch ? "try/catch" : ".catch"})`, async () => {
      const n = uniqueN();
      const at = domain();
      const parentId = await startRun("test-child-fallback", { leaf: { n, waitForSignal: true }, domain: at, timeoutMs: 60_000, tryCatch });
      const [child] = await until(
        () => childrenOf(parentId),
        (children) => children.length > 0,
        "the parent to start its child",
      );
      await until(
        () => runView(parentId),
        (run) => run.status === "waiting",
        "the parent to wait for its child",
      );
      // A catch-all that took the child's park for a failure billed the fallback's call while the child ran.
      expect((await runView(parentId)).usage.providerRequests).toBe(0);
      expect((await apiJson(`/v1/runs/${child.runId}/signals/go`, { method: "POST", json: { data: 1 } })).status).toBe(202);
      const run = await waitForRun(parentId);
      expect(run.result).toEqual({ doubled: 2 * n, email: expectedEmail("Child Person", at) });
      expect(await childLines(parentId)).toEqual(["child answered"]);
      expect(run.usage.providerRequests).toBe(1);
    });
  }

  it("runs its fallback once the child has timed out", async () => {
    const at = domain();
    const run = await waitForRun(
      await startRun("test-child-fallback", { leaf: { n: uniqueN(), waitForSignal: true }, domain: at, timeoutMs: 300 }),
    );
    expect(run.result).toEqual({ doubled: null, email: expectedEmail("Fallback Person", at) });
    expect(await childLines(run.runId)).toEqual(["child fell back"]);
    expect(run.usage.providerRequests).toBe(1);
  });

  it("runs its fallback once the child has failed", async () => {
    const at = domain();
    const run = await waitForRun(
      await startRun("test-child-fallback", { leaf: { n: uniqueN(), sleepMs: 200, fail: true }, domain: at, tryCatch: true }),
    );
    expect(run.result).toEqual({ doubled: null, email: expectedEmail("Fallback Person", at) });
    expect(await childLines(run.runId)).toEqual(["child fell back"]);
    expect(run.usage.providerRequests).toBe(1);
  });
});

describe("a field function that catches every error around its row's child", () => {
  it("does not run its fallback while the child still runs, past the row's in-process wait", async () => {
    const at = domain();
    const parentId = await startRun("test-row-child-fallback", { rows: [{ id: "r1", n: uniqueN() }], domain: at, timeoutMs: 60_000 });
    // The row waits for its child in process (500 ms under test), then its chunk yields and the run waits.
    await until(
      () => runView(parentId),
      (run) => run.status === "waiting",
      "the parent to wait for its row's child",
    );
    const [child] = await childrenOf(parentId);
    expect((await runView(parentId)).usage.providerRequests).toBe(0);
    expect((await apiJson(`/v1/runs/${child.runId}/signals/go`, { method: "POST", json: { data: 1 } })).status).toBe(202);
    const run = await waitForRun(parentId);
    expect(run.result).toEqual({ completed: 1, failed: 0 });
    expect((await datasetRows(parentId, "rows")).map((row) => row.email)).toEqual([expectedEmail("Child Person", `r1.${at}`)]);
    expect(run.usage.providerRequests).toBe(1);
  });

  it("runs its fallback once the row's child has timed out", async () => {
    const at = domain();
    const run = await waitForRun(
      await startRun("test-row-child-fallback", { rows: [{ id: "r1", n: uniqueN() }], domain: at, timeoutMs: 300 }),
    );
    expect(run.result).toEqual({ completed: 1, failed: 0 });
    expect((await datasetRows(run.runId, "rows")).map((row) => row.email)).toEqual([expectedEmail("Fallback Person", `r1.${at}`)]);
    expect(run.usage.providerRequests).toBe(1);
  });
});
