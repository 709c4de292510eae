import { abortAllDurableObjects, runInDurableObject } from "cloudflare:test";
import { canonicalJson, sha256Hex } from "../src/core/hash";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { testPlays } from "../src/plays/testing";
import { allEvents, api, apiJson, datasetRows, notices, simReset, simStats, startRun, waitForRun } from "./helpers";
import { env } from "cloudflare:workers";
import { clearFaults, faultState, setFaults, until } from "./chaos-helpers";

let unique = 0;
const tag = (name: string) => `${name}-${Date.now().toString(36)}-${unique++}`;
/** A number no other test uses: child identities are shared by the whole org. */
const uniqueN = () => Date.now() * 1000 + unique++;

/** The org's runs whose parent is `parentRunId`. */
async function childrenOf(parentRunId: string): Promise<any[]> {
  const { body } = await apiJson("/v1/runs?limit=200");
  return body.runs.filter((r: any) => r.parentRunId === parentRunId);
}

/** The first child of a parent, once it has one (up to 5 s). */
async function firstChildOf(parentRunId: string): Promise<any> {
  for (let i = 0; i < 500; i++) {
    const [child] = await childrenOf(parentRunId);
    if (child) return child;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`run ${parentRunId} started no child`);
}

describe("a child two parents wait on", () => {
  it("goes on for the other parent when the parent that started it stops waiting and cancels it", async () => {
    const leaf = { n: uniqueN(), waitForSignal: true };
    // a starts the child and gives up on it after 1.5 s; b makes the same call and waits as long as it takes.
    const a = await startRun("test-parent", { leaf, timeoutMs: 1_500 });
    const child = await firstChildOf(a);
    const b = await startRun("test-parent", { leaf });
    for (let i = 0; i < 500 && (await allEvents(b)).every((e) => e.type !== "child.started"); i++)
      await new Promise((r) => setTimeout(r, 10));
    expect((await allEvents(b)).find((e) => e.type === "child.started")).toMatchObject({ childRunId: child.runId, reused: true });
    expect((await waitForRun(a)).error).toMatchObject({ code: "child_timeout" });
    expect((await apiJson(`/v1/runs/${child.runId}`)).body.status).toBe("waiting");
    expect((await apiJson(`/v1/runs/${child.runId}/signals/go`, { method: "POST", json: { data: 1 } })).status).toBe(202);
    const done = await waitForRun(b);
    expect(done.status).toBe("completed");
    expect(done.result.first).toEqual({ n: leaf.n, doubled: 2 * leaf.n });
  });
});

describe("a child two parents stop waiting on", () => {
  it("is cancelled once the last of them stops, the one that joined it included", async () => {
    const leaf = { n: uniqueN(), waitForSignal: true };
    const a = await startRun("test-parent", { leaf, timeoutMs: 2_500 });
    const child = await firstChildOf(a);
    // b joins a's child and gives up on it first: a still waits, so it goes on; then a gives up, and nobody waits.
    const b = await startRun("test-parent", { leaf, timeoutMs: 800 });
    expect((await waitForRun(b)).error).toMatchObject({ code: "child_timeout" });
    expect((await waitForRun(a)).error).toMatchObject({ code: "child_timeout" });
    expect((await waitForRun(child.runId)).status).toBe("cancelled");
  });
});

describe("ctx.runPlay across a deploy", () => {
  /** The child's signal completes the parent, and no second child was started. */
  async function completesOnItsChild(parentId: string, childRunId: string): Promise<void> {
    expect((await apiJson(`/v1/runs/${childRunId}/signals/go`, { method: "POST", json: { data: 1 } })).status).toBe(202);
    expect((await waitForRun(parentId, { timeoutMs: 20_000 })).status).toBe("completed");
    expect(await childrenOf(parentId)).toHaveLength(1);
  }

  /** test-leaf deployed anew (`deployed` of it) and every object restarted: the parent replays its play. */
  async function afterLeafDeploy(deployed: (before: (typeof testPlays)[number]) => unknown, then: () => Promise<void>) {
    const at = testPlays.findIndex((play) => play.name === "test-leaf");
    const before = testPlays[at]!;
    testPlays[at] = deployed(before) as (typeof testPlays)[number];
    try {
      await abortAllDurableObjects();
      await then();
    } finally {
      testPlays[at] = before;
    }
  }

  /** The parent's call journaled under `old`, as earlier code keyed it: re-filed, one entry (not one left waiting). */
  async function refiledFrom(parentId: string, childRunId: string, old: string): Promise<void> {
    await runInDurableObject(env.RUN_COORDINATOR.getByName(parentId), (_object, state) => {
      state.storage.sql.exec("UPDATE waits SET key = ? WHERE kind = 'child'", old);
    });
    await abortAllDurableObjects();
    await completesOnItsChild(parentId, childRunId);
    // A stub of its own: the restart broke the one from before it.
    const entries = await runInDurableObject(env.RUN_COORDINATOR.getByName(parentId), (_object, state) =>
      state.storage.sql.exec<{ key: string; state: string }>("SELECT key, state FROM waits WHERE kind = 'child'").toArray(),
    );
    expect(entries).toEqual([{ key: expect.stringMatching(/^child:input:/), state: "done" }]);
  }

  it("waits on the child it started when the child play's code changed meanwhile, rather than starting another", async () => {
    const parentId = await startRun("test-parent", { leaf: { n: uniqueN(), waitForSignal: true } });
    const child = await firstChildOf(parentId);
    // A deploy changes test-leaf's code (its fingerprint).
    await afterLeafDeploy(
      (before) => ({ ...before, version: "deployed-again" }),
      () => completesOnItsChild(parentId, child.runId),
    );
  });

  it("waits on the child it started when the child play's input gained a defaulted field meanwhile", async () => {
    const parentId = await startRun("test-parent", { leaf: { n: uniqueN(), waitForSignal: true } });
    const child = await firstChildOf(parentId);
    // The parsed input held the new default: the replay missed the call's entry and started a second child.
    await afterLeafDeploy(
      (before) => ({ ...before, input: (before.input as unknown as z.ZodObject).extend({ note: z.string().default("") }) }),
      () => completesOnItsChild(parentId, child.runId),
    );
  });

  it("finds a call journaled under its parsed input (before this deploy) and waits on its child", async () => {
    const leaf = { n: uniqueN(), waitForSignal: true };
    const parentId = await startRun("test-parent", { leaf });
    const child = await firstChildOf(parentId);
    await refiledFrom(
      parentId,
      child.runId,
      `child:call:${(await sha256Hex(canonicalJson(["dev", "test-leaf", leaf, null, null]))).slice(0, 48)}`,
    );
  });

  it("finds a call under staleAfterSeconds journaled under its digest (older still) and waits on its child", async () => {
    const leaf = { n: uniqueN(), waitForSignal: true };
    const parentId = await startRun("test-parent", { leaf, staleAfterSeconds: 1e9 });
    const child = await firstChildOf(parentId);
    // Keyed by the child's digest, which held no window then (a child started before the windows has another id).
    const play = testPlays.find((p) => p.name === "test-leaf")!;
    const fingerprint = await sha256Hex(`${play.run.toString()}\n${play.version ?? ""}`);
    const digest = await sha256Hex(canonicalJson(["dev", "test-leaf", fingerprint, leaf, null, null]));
    await refiledFrom(parentId, child.runId, `child:${digest.slice(0, 48)}`);
  });
});

describe("ctx.runPlay at play level", () => {
  it("runs the child as its own run, linked to the parent both ways, and a rerun reuses it", async () => {
    const n = uniqueN();
    const parent = await waitForRun(await startRun("test-parent", { leaf: { n } }));
    expect(parent.status).toBe("completed");
    expect(parent.result).toEqual({ first: { n, doubled: 2 * n }, second: null });

    const [child, ...others] = await childrenOf(parent.runId);
    expect(others).toHaveLength(0);
    expect(child).toMatchObject({ play: "test-leaf", status: "completed", parentRunId: parent.runId });
    expect(child.runId).toMatch(/^run_[0-9a-f]{32}$/);
    const childView = (await apiJson(`/v1/runs/${child.runId}`)).body;
    expect(childView).toMatchObject({ status: "completed", parentRunId: parent.runId, result: { n, doubled: 2 * n } });

    const childEvents = await allEvents(child.runId);
    expect(childEvents[0]).toMatchObject({ type: "run.started", parentRunId: parent.runId, depth: 1 });
    const parentEvents = await allEvents(parent.runId);
    expect(parentEvents.filter((e) => e.type === "child.started")).toEqual([
      expect.objectContaining({ childRunId: child.runId, play: "test-leaf", reused: false }),
    ]);
    expect(parentEvents.filter((e) => e.type === "child.finished")).toEqual([
      expect.objectContaining({ childRunId: child.runId, status: "completed" }),
    ]);

    const rerun = await apiJson(`/v1/runs/${parent.runId}/rerun`, { method: "POST" });
    const again = await waitForRun(rerun.body.runId);
    expect(again.result).toEqual(parent.result);
    expect(await childrenOf(again.runId)).toHaveLength(0);
    expect((await allEvents(again.runId)).filter((e) => e.type === "child.started")).toEqual([
      expect.objectContaining({ childRunId: child.runId, reused: true }),
    ]);
  });

  it("makes two identical calls one child, and a distinct key another", async () => {
    const n = uniqueN();
    const twice = await waitForRun(await startRun("test-parent", { leaf: { n }, twice: true }));
    expect(twice.result.second).toEqual(twice.result.first);
    expect(await childrenOf(twice.runId)).toHaveLength(1);
    const keyed = await waitForRun(await startRun("test-parent", { leaf: { n }, key: "another" }));
    expect(keyed.status).toBe("completed");
    expect(await childrenOf(keyed.runId)).toHaveLength(1);
  });

  it("surfaces a child's failure as a child_failed error of the call, and runs a failed child again on a rerun", async () => {
    const n = uniqueN();
    const parent = await waitForRun(await startRun("test-parent", { leaf: { n, fail: true } }));
    expect(parent.status).toBe("failed");
    expect(parent.error.code).toBe("child_failed");
    expect(parent.error.message).toContain(`leaf ${n} failed on purpose`);
    const [child] = await childrenOf(parent.runId);
    expect(child.status).toBe("failed");
    const rerun = await waitForRun((await apiJson(`/v1/runs/${parent.runId}/rerun`, { method: "POST" })).body.runId);
    expect(rerun.status).toBe("failed");
    const [again] = await childrenOf(rerun.runId);
    expect(again.runId).not.toBe(child.runId);
  });

  it("cancels a timed-out child again when the first cancel fails, then fails the wait child_timeout", async () => {
    await setFaults([{ point: "child.cancel", play: "test-parent", fromCall: 1, times: 1 }]);
    try {
      const parent = await waitForRun(await startRun("test-parent", { leaf: { n: uniqueN(), waitForSignal: true }, timeoutMs: 300 }));
      expect(parent.status).toBe("failed");
      expect(parent.error).toMatchObject({ code: "child_timeout" });
      expect((await faultState()).counts[0]).toBeGreaterThanOrEqual(2);
      const [child] = await childrenOf(parent.runId);
      expect((await waitForRun(child.runId)).status).toBe("cancelled");
    } finally {
      await clearFaults();
    }
  });

  it("stops waiting after timeoutMs with child_timeout, and cancels the child it started", async () => {
    const parent = await waitForRun(await startRun("test-parent", { leaf: { n: uniqueN(), waitForSignal: true }, timeoutMs: 300 }));
    expect(parent.status).toBe("failed");
    expect(parent.error).toMatchObject({ code: "child_timeout" });
    expect(parent.error.message).toContain("did not finish within 300 ms");
    const [child] = await childrenOf(parent.runId);
    expect((await waitForRun(child.runId)).status).toBe("cancelled");
  });

  it("cancels the children a cancelled parent waits on", async () => {
    const parentId = await startRun("test-parent", { leaf: { n: uniqueN(), waitForSignal: true } });
    let child: any;
    for (let i = 0; i < 500 && !child; i++) {
      [child] = await childrenOf(parentId);
      await new Promise((r) => setTimeout(r, 20));
    }
    await apiJson(`/v1/runs/${parentId}/cancel`, { method: "POST" });
    expect((await waitForRun(parentId)).status).toBe("cancelled");
    expect((await waitForRun(child.runId)).status).toBe("cancelled");
  });
});

describe("ctx.runPlay with staleAfterSeconds", () => {
  it("gives each parent past the window a fresh child in one start, however many refreshes came before", async () => {
    const leaf = { n: uniqueN() };
    const starts: number[] = [];
    const children = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const parent = await waitForRun(await startRun("test-parent", { leaf, staleAfterSeconds: 0 }));
      expect(parent.status, JSON.stringify(parent.error)).toBe("completed");
      starts.push(parent.usage.objectRpcsByKind["run.start"]);
      for (const child of await childrenOf(parent.runId)) children.add(child.runId);
    }
    // Found by probing generations, the third parent's child cost three starts (the 51st refresh failed the call).
    expect(starts).toEqual([1, 1, 1]);
    expect(children.size).toBe(3);
  });

  it("shares the child among parents started within one window", async () => {
    const leaf = { n: uniqueN() };
    // A window of 31 years: both parents start in the same one.
    const first = await waitForRun(await startRun("test-parent", { leaf, staleAfterSeconds: 1e9 }));
    const second = await waitForRun(await startRun("test-parent", { leaf, staleAfterSeconds: 1e9 }));
    expect(second.result).toEqual(first.result);
    const [child] = await childrenOf(first.runId);
    expect((await allEvents(second.runId)).filter((e) => e.type === "child.started")).toEqual([
      expect.objectContaining({ childRunId: child.runId, reused: true }),
    ]);
  });
});

describe("a child that completed in time, whose end message was lost", () => {
  afterEach(clearFaults);
  it("is asked at the call's timeout: its result is the call's, not child_timeout", async () => {
    // The child's one message to its parent fails; its next check (10 s) comes after the call's timeout (4 s), as
    // production's minute does: the check at the timeout asked nothing and failed a call whose child had completed.
    await setFaults([{ point: "child.finished", play: "test-leaf", times: 1 }]);
    const n = uniqueN();
    const parentId = await startRun(
      "test-parent",
      { leaf: { n, sleepMs: 100 }, timeoutMs: 4_000 },
      { testPolicy: { childCheckIntervalMs: 10_000 } },
    );
    const parent = await waitForRun(parentId);
    expect(parent.status, JSON.stringify(parent.error)).toBe("completed");
    expect(parent.result).toEqual({ first: { n, doubled: 2 * n }, second: null });
    expect((await faultState()).counts).toEqual([1]);
  });
});

describe("a cancelled parent's children", () => {
  afterEach(clearFaults);

  it("are cancelled by the parent's next alarm when the alarm that ended the parent died before cancelling them", async () => {
    const parentId = await startRun("test-parent", { leaf: { n: uniqueN(), waitForSignal: true } });
    let child: any;
    for (let i = 0; i < 500 && !child; i++) {
      [child] = await childrenOf(parentId);
      await new Promise((r) => setTimeout(r, 20));
    }
    // The parent's alarm that ends it cancelled dies right after, as an eviction would, before it reaches its children.
    await setFaults([{ point: "run.alarm", play: "test-parent", fromCall: 1, times: 1, crash: true }]);
    await apiJson(`/v1/runs/${parentId}/cancel`, { method: "POST" });
    expect((await waitForRun(parentId)).status).toBe("cancelled");
    expect((await waitForRun(child.runId)).status).toBe("cancelled");
  });

  it("hold a rerun of their parent off (409 run_active) until they are cancelled: it took a child about to be cancelled", async () => {
    const n = uniqueN();
    const parentId = await startRun("test-parent", { leaf: { n, waitForSignal: true } });
    let child: any;
    for (let i = 0; i < 500 && !child; i++) {
      [child] = await childrenOf(parentId);
      await new Promise((r) => setTimeout(r, 20));
    }
    // The parent's first cancel of its child fails: its alarm tries again 5 s later.
    await setFaults([{ point: "child.cancel", play: "test-parent", fromCall: 1, times: 1 }]);
    await apiJson(`/v1/runs/${parentId}/cancel`, { method: "POST" });
    expect((await waitForRun(parentId)).status).toBe("cancelled");
    const early = await apiJson(`/v1/runs/${parentId}/rerun`, { method: "POST" });
    expect(early.status).toBe(409);
    expect(early.body.error).toMatchObject({ code: "run_active", details: { status: "cancelling" } });

    expect((await waitForRun(child.runId)).status).toBe("cancelled");
    // The parent settles its wait on the child once the child's cancel answered: a moment after the child ended.
    const rerun = (
      await until(
        () => apiJson(`/v1/runs/${parentId}/rerun`, { method: "POST", headers: { "Idempotency-Key": `after-${n}` } }),
        (answer) => answer.status === 202,
        "the rerun to be taken",
      )
    ).body.runId as string;
    let next: any;
    for (let i = 0; i < 500 && !next; i++) {
      [next] = await childrenOf(rerun);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(next.runId).not.toBe(child.runId);
    expect((await apiJson(`/v1/runs/${next.runId}/signals/go`, { method: "POST", json: { data: 1 } })).status).toBe(202);
    const done = await waitForRun(rerun);
    expect(done.status, JSON.stringify(done.error)).toBe("completed");
  });
});

describe("a child another parent is cancelling", () => {
  afterEach(async () => {
    await env.FAULTS!.getByName("faults").release(0);
    await clearFaults();
  });

  it("is not taken by a rerun of its parent: the rerun starts the next generation of the child and completes", async () => {
    const n = uniqueN();
    // The child sleeps a moment, then waits for a signal: the alarm that ends its sleep is held once it has driven the
    // run, so a cancel finds its invocation under way, and the child stays `cancelling` until it is released.
    await setFaults([{ point: "run.alarm", play: "test-leaf", hold: true, times: 1 }]);
    const parentId = await startRun("test-parent", { leaf: { n, sleepMs: 1_000, waitForSignal: true } });
    await until(faultState, (state) => (state.counts[0] ?? 0) > 0, "the child's alarm to be held");
    const [child] = await childrenOf(parentId);
    await apiJson(`/v1/runs/${parentId}/cancel`, { method: "POST" });
    expect((await waitForRun(parentId)).status).toBe("cancelled");
    // The alarm that ended the parent cancels its children after it stored the end (README, "Child plays").
    await until(
      async () => (await apiJson(`/v1/runs/${child.runId}`)).body.status,
      (status) => status === "cancelling",
      "the parent's cancel to reach its child",
    );

    // The parent's cancel of its child may not have answered it yet: the parent shows `cancelling` (409 run_active) until
    // it has (a rerun taken once on that race waited 10 s for a child of `undefined`).
    const rerun = (
      await until(
        () => apiJson(`/v1/runs/${parentId}/rerun`, { method: "POST", headers: { "Idempotency-Key": `taken-${n}` } }),
        (answer) => answer.status === 202,
        "the rerun to be taken",
      )
    ).body.runId as string;
    let next: any;
    for (let i = 0; i < 500 && !next; i++) {
      [next] = await childrenOf(rerun);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(next.runId).not.toBe(child.runId);
    await env.FAULTS!.getByName("faults").release(0);
    expect((await apiJson(`/v1/runs/${next.runId}/signals/go`, { method: "POST", json: { data: 1 } })).status).toBe(202);
    const done = await waitForRun(rerun);
    expect(done.status, JSON.stringify(done.error)).toBe("completed");
    expect(done.result).toEqual({ first: { n, doubled: 2 * n }, second: null });
    expect((await waitForRun(child.runId)).status).toBe("cancelled");
  });
});

describe("governance of child plays", () => {
  it("refuses a play that runs itself with its own input, which would wait on itself: play_cycle", async () => {
    const parent = await waitForRun(await startRun("test-self", { tag: `cycle-${uniqueN()}` }));
    expect(parent.status).toBe("failed");
    const [child] = await childrenOf(parent.runId);
    const childRun = await waitForRun(child.runId);
    expect(childRun.status).toBe("failed");
    expect(childRun.error.code).toBe("play_cycle");
    expect(parent.error.message).toContain("play_cycle");
  });

  it("nests plays up to maxPlayDepth, and fails the call past it with a message naming the limit", async () => {
    const ok = await waitForRun(await startRun("test-nest", { levels: 3, tag: tag("deep") }));
    expect(ok.status).toBe("completed");
    expect(ok.result).toEqual({ levels: 3, below: { levels: 2, below: { levels: 1, below: { levels: 0, below: null } } } });

    const tooDeep = await waitForRun(await startRun("test-nest", { levels: 5, tag: tag("deeper") }));
    expect(tooDeep.status).toBe("failed");
    expect(tooDeep.error.code).toBe("child_failed");
    expect(tooDeep.error.message).toContain("play_depth_exceeded");
    expect(tooDeep.error.message).toContain("at most 3 deep (maxPlayDepth)");
  });

  it("starts at most maxChildrenPerRun children; the rows past it fail naming the limit", async () => {
    const base = uniqueN();
    const rows = Array.from({ length: 30 }, (_, i) => ({ id: `r${i}`, n: base + i }));
    const run = await waitForRun(await startRun("test-map-children", { rows }));
    expect(run.status).toBe("completed");
    expect(run.result).toMatchObject({ total: 30, completed: 25, failed: 5 });
    const stored = await datasetRows(run.runId, "kids");
    const failed = stored.filter((r) => r._status === "failed");
    expect(failed).toHaveLength(5);
    for (const row of failed) expect(row._error).toContain("at most 25 child plays (maxChildrenPerRun)");
    for (const row of stored.filter((r) => r._status === "completed")) expect(row.child).toEqual({ n: row.n, doubled: 2 * row.n });
    expect(await childrenOf(run.runId)).toHaveLength(25);
  });

  it("fails only the row whose child failed", async () => {
    const base = uniqueN();
    const rows = [0, 1, 2].map((i) => ({ id: `f${i}`, n: base + i, fail: i === 1 }));
    const run = await waitForRun(await startRun("test-map-children", { rows }));
    expect(run.result).toMatchObject({ completed: 2, failed: 1 });
    const stored = await datasetRows(run.runId, "kids");
    expect(stored[1]).toMatchObject({ _status: "failed", _error: expect.stringContaining(`leaf ${base + 1} failed on purpose`) });
  });
});

describe("ctx.runPlay inside ctx.map", () => {
  it("a row whose child runs long makes its chunk yield (the run waits), then completes with the child's result", async () => {
    const base = uniqueN();
    const rows = [0, 1, 2].map((i) => ({ id: `s${i}`, n: base + i, sleepMs: i === 2 ? 1_500 : 0 }));
    const runId = await startRun("test-map-children", { rows });
    const run = await waitForRun(runId);
    expect(run.result).toMatchObject({ completed: 3, failed: 0 });
    const stored = await datasetRows(runId, "kids");
    expect(stored.map((r) => r.child)).toEqual(rows.map((r) => ({ n: r.n, doubled: 2 * r.n })));
    expect(await notices(runId)).toContain("invocation_suspended");
    expect(await childrenOf(runId)).toHaveLength(3);
  });

  it("fails the run (onRowError: 'fail') for a row that failed before another row's long child made the map yield", async () => {
    const base = uniqueN();
    // One row a chunk: the failing row's chunk ends, then the invocation yields for the other row's child.
    const rows = [
      { id: "rf0", n: base, fail: true },
      { id: "rf1", n: base + 1, sleepMs: 1_500 },
    ];
    const run = await waitForRun(await startRun("test-map-children", { rows, onRowError: "fail" }, { testPolicy: { chunkRows: 1 } }));
    expect(run.status).toBe("failed");
    expect(run.error).toMatchObject({ code: "row_failed", message: expect.stringContaining("rf0") });
    // rf1's child, still running when its parent failed, is cancelled with it rather than left to run to its own limit
    // (rf0's failed on purpose).
    const ends = await Promise.all((await childrenOf(run.runId)).map(async (child) => (await waitForRun(child.runId)).status));
    expect(ends.sort()).toEqual(["cancelled", "failed"]);
  });

  it("acts for the row when a field function calls the play's own ctx, and refuses a wait there", async () => {
    const base = uniqueN();
    const rows = [0, 1, 2].map((i) => ({ id: `v${i}`, n: base + i, sleepMs: i === 0 ? 800 : 0 }));
    const run = await waitForRun(await startRun("test-map-children", { rows, viaPlayCtx: true }));
    expect(run.result).toMatchObject({ completed: 3, failed: 0 });
    expect((await datasetRows(run.runId, "kids")).map((r) => r.child.doubled)).toEqual(rows.map((r) => 2 * r.n));

    const refused = await waitForRun(await startRun("test-map-children", { rows: [{ id: "w0", n: uniqueN() }], sleepInRow: true }));
    expect(refused.result).toMatchObject({ completed: 0, failed: 1 });
    const [row] = await datasetRows(refused.runId, "kids");
    expect(row._error).toContain("ctx.sleep parks the whole run, so it cannot be called from a field function");
  });

  it("demo-accounts: 20 rows, one child each, every coordinator aborted mid-run: each child runs once and the parent completes", async () => {
    await simReset();
    await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 25 } });
    try {
      const domain = `${tag("acct")}.test`;
      const accounts = Array.from({ length: 20 }, (_, a) => ({ id: `a${a}`, domain, people: [0, 1, 2].map((p) => `Person ${a} ${p}`) }));
      const runId = await startRun("demo-accounts", { accounts });
      for (const wanted of [3, 12]) {
        for (let i = 0; i < 2000 && (await childrenOf(runId)).length < wanted; i++) await new Promise((r) => setTimeout(r, 10));
        await abortAllDurableObjects();
      }
      const run = await waitForRun(runId, { timeoutMs: 90_000 });
      expect(run.status).toBe("completed");
      expect(run.result).toEqual({ rows: 20, failed: 0 });
      const stored = await datasetRows(runId, "accounts");
      expect(stored.map((r) => [r._key, r._status, r.leads])).toEqual(accounts.map((a) => [a.id, "completed", { rows: 3, failed: 0 }]));

      const children = await childrenOf(runId);
      expect(children).toHaveLength(20);
      expect(new Set(children.map((c) => c.runId)).size).toBe(20);
      expect(children.every((c) => c.play === "demo-enrich" && c.status === "completed")).toBe(true);
      const stats = await simStats();
      expect(stats.byTool.sim_find_email.billed).toBe(60);
      expect(stats.byTool.sim_verify_email.billed).toBe(60);
      const events = await allEvents(runId);
      expect(new Set(events.filter((e) => e.type === "child.finished").map((e) => e.childRunId)).size).toBe(20);
    } finally {
      await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 0 } });
    }
  });
});
