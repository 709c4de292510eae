import { abortAllDurableObjects, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { until } from "./chaos-helpers";
import { allEvents, apiJson, runView, startRun, waitForRun } from "./helpers";

let unique = 0;
/** A number no other test uses: child identities are shared by the whole org. */
const uniqueN = () => Date.now() * 1000 + unique++;

/** The org's runs whose parent is `parentRunId`. */
async function childrenOf(parentRunId: string): Promise<any[]> {
  const { body } = await apiJson("/v1/runs?limit=200");
  return body.runs.filter((r: any) => r.parentRunId === parentRunId);
}

describe("ctx.runPlay not awaited", () => {
  it("starts its child, and the run ends only once the child has", async () => {
    const leaf = { n: uniqueN() };
    const parentId = await startRun("test-detached-child", { leaf });
    const parent = await waitForRun(parentId);
    expect(parent.status).toBe("completed");
    expect(parent.result).toEqual({ returned: true });
    const children = await childrenOf(parentId);
    expect(children).toHaveLength(1);
    expect((await waitForRun(children[0].runId)).result).toEqual({ n: leaf.n, doubled: 2 * leaf.n });
    const types = (await allEvents(parentId)).map((e) => e.type);
    expect(types.indexOf("child.finished")).toBeGreaterThan(types.indexOf("child.started"));
    expect(types.indexOf("run.completed")).toBeGreaterThan(types.indexOf("child.finished"));
  });

  it("ends as the play says when the child it never read failed; the ledger says how the child ended", async () => {
    const parentId = await startRun("test-detached-child", { leaf: { n: uniqueN(), fail: true } });
    const parent = await waitForRun(parentId);
    expect(parent.status).toBe("completed");
    expect((await allEvents(parentId)).find((e) => e.type === "child.finished")).toMatchObject({ status: "failed" });
  });

  it("keeps the run waiting while its child waits for a signal", async () => {
    const leaf = { n: uniqueN(), waitForSignal: true };
    const parentId = await startRun("test-detached-child", { leaf });
    let children: any[] = [];
    for (let i = 0; i < 500 && children.length === 0; i++) {
      if ((await runView(parentId)).status === "completed") break;
      children = await childrenOf(parentId);
      if (children.length === 0) await new Promise((r) => setTimeout(r, 10));
    }
    expect(children).toHaveLength(1);
    for (let i = 0; i < 500 && (await runView(parentId)).status !== "waiting"; i++) await new Promise((r) => setTimeout(r, 10));
    expect((await runView(parentId)).status).toBe("waiting");
    expect((await apiJson(`/v1/runs/${children[0].runId}/signals/go`, { method: "POST", json: { data: 1 } })).status).toBe(202);
    const parent = await waitForRun(parentId);
    expect(parent.status).toBe("completed");
    expect((await runView(children[0].runId)).status).toBe("completed");
  });
});

describe("the same ctx.runPlay call made twice at once with different timeoutMs", () => {
  it.each([
    { order: "made second", timeouts: [null, 800], outcome: (result: unknown) => [result, { code: "child_timeout" }] },
    { order: "made first", timeouts: [800, null], outcome: (result: unknown) => [{ code: "child_timeout" }, result] },
  ])(
    "times out only the call that has one ($order): the child goes on for the other, which gets its result",
    async ({ timeouts, outcome }) => {
      const leaf = { n: uniqueN(), waitForSignal: true };
      const parentId = await startRun("test-child-timeouts", { leaf, timeouts });
      await until(
        () => allEvents(parentId),
        (events) => events.some((e) => e.type === "child.finished" || e.type === "run.completed" || e.type === "run.failed"),
        "the call with a timeout to time out",
      );
      const [child] = await childrenOf(parentId);
      expect((await runView(child.runId)).status).toBe("waiting");
      expect((await apiJson(`/v1/runs/${child.runId}/signals/go`, { method: "POST", json: { data: 1 } })).status).toBe(202);
      const parent = await waitForRun(parentId);
      expect(parent.result).toEqual(outcome({ result: { n: leaf.n, doubled: 2 * leaf.n } }));
      expect(await childrenOf(parentId)).toHaveLength(1);
    },
  );

  it("finds a call with a timeout journaled before (under the key without it) and waits on its child", async () => {
    const parentId = await startRun("test-parent", { leaf: { n: uniqueN(), waitForSignal: true }, timeoutMs: 60_000 });
    const child = await until(
      () => childrenOf(parentId),
      (children) => children.length > 0,
      "the parent to start its child",
    ).then((children) => children[0]);
    const entries = () =>
      runInDurableObject(env.RUN_COORDINATOR.getByName(parentId), (_object, state) =>
        state.storage.sql.exec<{ key: string; state: string }>("SELECT key, state FROM waits WHERE kind = 'child'").toArray(),
      );
    // Filed as earlier code filed every call, and the parent restarted: its replay finds the entry, not a new one.
    await until(entries, (rows) => rows.length === 1, "the call's entry");
    await runInDurableObject(env.RUN_COORDINATOR.getByName(parentId), (_object, state) => {
      state.storage.sql.exec("UPDATE waits SET key = substr(key, 1, instr(key, ':timeout:') - 1) WHERE kind = 'child'");
    });
    await abortAllDurableObjects();
    expect((await apiJson(`/v1/runs/${child.runId}/signals/go`, { method: "POST", json: { data: 1 } })).status).toBe(202);
    expect((await waitForRun(parentId)).status).toBe("completed");
    expect(await entries()).toEqual([{ key: expect.stringMatching(/^child:input:[0-9a-f]{48}:timeout:60000$/), state: "done" }]);
    expect(await childrenOf(parentId)).toHaveLength(1);
  });
});
