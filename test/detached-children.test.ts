import { describe, expect, it } from "vitest";
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
