/**
 * A map's executors are sized by its provider's pace and latency (src/runtime/executor/sizing.ts). Before any
 * request has been answered, the age of the oldest one still waiting is the latency: a slow provider widens the
 * map during its first answer's wait, not after it.
 */
import { afterEach, describe, expect, it } from "vitest";
import { api, apiJson, runView, simReset, startRun, waitForRun } from "./helpers";
import { callRows, SIM_DEFAULTS, setSim, until } from "./chaos-helpers";

afterEach(async () => {
  await setSim(SIM_DEFAULTS);
  expect((await api("/v1/pacing/sim", { method: "DELETE" })).status).toBe(200);
});

describe("executor sizing", () => {
  it("widens the map while its first requests still wait for an answer", async () => {
    await simReset();
    // 100 requests/s: a request that has waited half a second already asks for 100 × 0.5 × 1.5 / 6 ≈ 13 executors,
    // past the ceiling of 4. The provider answers nothing for ten seconds.
    expect((await api("/v1/pacing/sim", { method: "PUT", json: { requestsPerSecond: 100, concurrency: 250 } })).status).toBe(200);
    await setSim({ ...SIM_DEFAULTS, latencyMs: 10_000 });
    const runId = await startRun(
      "test-calls",
      { rows: callRows(`size${Date.now().toString(36)}`, 600) },
      { testPolicy: { minExecutors: 1, maxExecutors: 4, chunkRows: 50 } },
    );

    // Bounds only a hung test: the first answer would come at ten seconds, and sizing by it is not what this proves.
    const widened = await until(
      async () => (await runView(runId)).progress.maps.calls,
      (map) => map?.executors === 4,
      "the map to reach its ceiling of executors",
      9_000,
    );
    expect(widened).toMatchObject({ completed: 0, failed: 0 });

    expect((await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" })).status).toBe(202);
    expect((await waitForRun(runId)).status).toBe("cancelled");
  });
});
