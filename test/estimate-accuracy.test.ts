/**
 * An estimate says what the run would bill: a field calling the play's own
 * ctx makes the row's calls (as in a run), a call whose outcome is unknown is
 * not sent again without `retryUnknown`, and an upload's sample stays within
 * its bytes however its rows are spread.
 */
import { afterEach, describe, expect, it } from "vitest";
import { clearFaults, setFaults } from "./chaos-helpers";
import { apiJson, datasetRows, simReset, simStats, startRun, waitForRun } from "./helpers";

const estimate = (body: unknown) => apiJson("/v1/runs/estimate", { method: "POST", json: body });
const tag = () => crypto.randomUUID().slice(0, 8);

afterEach(async () => {
  await clearFaults();
});

describe("a field calling the play's own ctx", () => {
  it("estimates its tool calls as the row's: what the run then bills", async () => {
    const p = tag();
    const rows = Array.from({ length: 8 }, (_, i) => ({ id: `${p}-${i}`, name: `Outer ${p} ${i}`, domain: "outer.test" }));
    const before = await estimate({ play: "test-outer-fields", input: { rows } });
    expect(before.status).toBe(200);
    const run = await waitForRun(await startRun("test-outer-fields", { rows }));
    expect(run.status).toBe("completed");
    // 8 finds are known; each row's verify depends on an email not bought yet: priced from history, or unbounded.
    expect(before.body.calls).toEqual({ sim_find_email: { reused: 0, new: 8 } });
    expect(before.body.exact).toBe(false);
    expect(before.body.spend.low).toBe(8);
    // Rerun with the finds stored (the rows themselves recomputed): every call answered from receipts, exactly.
    const again = await estimate({ play: "test-outer-fields", input: { rows }, force: true });
    expect(again.body).toMatchObject({ exact: true, spend: { low: 0, expected: 0, high: 0 } });
    expect(again.body.calls).toEqual({ sim_find_email: { reused: 8, new: 0 }, sim_verify_email: { reused: 8, new: 0 } });
  });

  it("estimates a child play started through it as a row's: not exact, no upper bound", async () => {
    const base = 700_000 + Math.floor(Math.random() * 100_000);
    const rows = [0, 1, 2].map((i) => ({ id: `outer-child-${base}-${i}`, n: base + i }));
    const { status, body } = await estimate({ play: "test-map-children", input: { rows, viaPlayCtx: true } });
    expect(status).toBe(200);
    expect(body).toMatchObject({ exact: false, spend: { high: null } });
    expect(body.notes.join(" ")).toContain("ctx.runPlay");
  });
});

describe("calls whose outcome is unknown", () => {
  it("are priced as the run would send them: not without retryUnknown, new with it", async () => {
    await simReset();
    const p = tag();
    const rows = Array.from({ length: 6 }, (_, i) => ({
      id: `u${i}`,
      tool: "test_unkeyed_find",
      input: { name: `Unknown ${p} ${i}`, domain: "unknown-estimate.test" },
    }));
    const input = { rows, dataset: `unknown-${p}` };
    // The provider answered and the attempt died before storing it: a provider that ignores keys, no recover.
    await setFaults([{ point: "provider.after", tool: "test_unkeyed_find", fromCall: 1, times: 1, crash: true }]);
    const first = await waitForRun(await startRun("test-calls", input));
    await clearFaults();
    const unknown = (await datasetRows(first.runId, input.dataset)).filter((r) => r._status === "failed").length;
    expect(unknown).toBeGreaterThan(0);

    const plain = await estimate({ play: "test-calls", input });
    const resend = await estimate({ play: "test-calls", input, retryUnknown: true });
    const sentBefore = (await simStats()).calls;
    const rerun = await waitForRun((await apiJson(`/v1/runs/${first.runId}/rerun`, { method: "POST" })).body.runId);
    expect((await simStats()).calls).toBe(sentBefore);
    expect(plain.body).toMatchObject({ exact: true, spend: { expected: rerun.usage.spend.total } });
    expect(rerun.usage.spend.total).toBe(0);
    const retried = await waitForRun(
      (await apiJson(`/v1/runs/${first.runId}/rerun`, { method: "POST", json: { retryUnknown: true } })).body.runId,
    );
    expect(retried.usage.spend.total).toBeGreaterThan(0);
    expect(resend.body).toMatchObject({ exact: true, spend: { expected: retried.usage.spend.total } });
  });
});

describe("an upload whose wide rows come first", () => {
  it("is estimated from about 8 MiB of its rows, not 2,000 rows at the file's average size", async () => {
    const notes = "n".repeat(40_000);
    const p = tag();
    const wide = Array.from({ length: 300 }, (_, i) => JSON.stringify({ id: `${p}-w${i}`, name: `Wide ${i}`, domain: "skew.test", notes }));
    const narrow = Array.from({ length: 100_000 }, (_, i) => JSON.stringify({ id: `${p}-n${i}`, name: `N ${i}`, domain: "skew.test" }));
    const lines = [...wide, ...narrow];
    const uploaded = await apiJson("/v1/uploads", {
      method: "POST",
      body: lines.join("\n"),
      headers: { "Content-Type": "application/x-ndjson" },
    });
    expect(uploaded.status).toBe(201);
    const { status, body } = await estimate({ play: "demo-enrich", input: { upload: uploaded.body.uploadId } });
    expect(status).toBe(200);
    const sampled = Number(/estimated from its first (\d+), scaled/.exec(body.notes.join(" "))?.[1]);
    expect(sampled).toBeGreaterThan(0);
    const bytes = lines.slice(0, sampled).reduce((sum, line) => sum + line.length + 1, 0);
    expect(bytes).toBeLessThanOrEqual(8 * 1024 * 1024);
    expect(bytes).toBeGreaterThan(7 * 1024 * 1024);
  });
});
