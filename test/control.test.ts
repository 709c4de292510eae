import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { FAULT_OBJECT_NAME } from "../src/clients/faults";
import { sheetShardName } from "../src/clients/shards";
import { canonicalJson, sha256Hex } from "../src/core/hash";
import { clearFaults, setFaults } from "./chaos-helpers";
import { api, apiJson, datasetRows, simReset, simStats, startRun, waitForRun } from "./helpers";

const rowsOf = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, i) => ({ id: `${prefix}${i}`, name: `Control ${prefix} ${i}`, domain: "control.test" }));

/** Test policy: chunks of 50 rows, 4 chunks in flight (src/core/policy.ts). */
const ONE_WAVE_OF_CALLS = 4 * 50;

async function until(condition: () => Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("cancel and rerun over HTTP", () => {
  it("cancel stops provider calls within one wave and ends the run cancelled; a rerun completes the rest and bills nothing twice", async () => {
    await simReset();
    await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 40 } });
    const rows = rowsOf("cancel", 600);
    let runId: string;
    let callsAtCancel: number;
    try {
      runId = await startRun("test-map", { rows });
      await until(async () => (await apiJson(`/v1/runs/${runId}`)).body.progress.maps.items?.completed >= 100, "some rows");
      callsAtCancel = (await simStats()).calls;
      const cancel = await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" });
      expect(cancel.status).toBe(202);
      expect(cancel.body.runId).toBe(runId);
      const run = await waitForRun(runId);
      expect(run.status).toBe("cancelled");
      expect(run.progress.maps.items.completed).toBeLessThan(600);
    } finally {
      await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 0 } });
    }

    // Its dataset's shards refuse its epochs from now on: an attempt an executor still held cannot lease rows again.
    const { runAttempt } = await waitForRun(runId);
    const shard = env.SHEET_SHARD.getByName(sheetShardName("dev", "test-map", "items", 0));
    const late = await shard.claimRows({
      attempt: { attemptId: `${runId}/items/0/${runAttempt}`, runId, attemptSeq: runAttempt },
      leaseTtlMs: 60_000,
      recompute: false,
      rows: [{ key: rows[599]!.id, index: 599, input: rows[599]! }],
    });
    expect(late.rows).toEqual([{ key: rows[599]!.id, status: "fenced", newerSeq: runAttempt + 1 }]);

    // Once the run is cancelled nothing more reaches the provider, and what did was at most the wave in flight.
    const settled = (await simStats()).calls;
    expect(settled - callsAtCancel).toBeLessThanOrEqual(ONE_WAVE_OF_CALLS);
    for (let read = 0; read < 3; read++) {
      await new Promise((r) => setTimeout(r, 50));
      expect((await simStats()).calls).toBe(settled);
    }

    const rerun = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST" });
    expect(rerun.status).toBe(202);
    expect(rerun.body).toEqual({
      runId: expect.stringMatching(/^run_/),
      status: "queued",
      rerunOf: runId,
      links: {
        self: `/v1/runs/${rerun.body.runId}`,
        live: `/v1/runs/${rerun.body.runId}/live`,
        events: `/v1/runs/${rerun.body.runId}/events`,
        datasets: {},
      },
    });
    expect(rerun.body.runId).not.toBe(runId);
    const done = await waitForRun(rerun.body.runId);
    expect(done).toMatchObject({ status: "completed", play: "test-map", result: { total: 600, completed: 600, failed: 0 } });
    const stats = await simStats();
    expect(stats.duplicates).toBe(0);
    expect(stats.billed).toBe(600);
    const stored = await datasetRows(rerun.body.runId, "items");
    expect(stored.map((r) => r._key)).toEqual(rows.map((r) => r.id));
  });

  it("buys each call once for two forceToolRefresh reruns started together: each takes a result bought since it started", async () => {
    const runId = await startRun("test-map", { rows: rowsOf("together", 3) });
    await waitForRun(runId);
    await simReset();
    // The refreshed calls are held once answered: both reruns have started before any result is stored.
    await setFaults([{ point: "provider.after", play: "test-map", hold: true, times: 20 }]);
    const injector = env.FAULTS!.getByName(FAULT_OBJECT_NAME);
    try {
      const rerun = () => apiJson(`/v1/runs/${runId}/rerun`, { method: "POST", json: { forceToolRefresh: true } });
      const [first, second] = [await rerun(), await rerun()];
      await injector.held(0);
      await until(async () => {
        await injector.release(0);
        const runs = await Promise.all([first, second].map((r) => apiJson(`/v1/runs/${r.body.runId}`)));
        return runs.every((r) => r.body.status === "completed");
      }, "both reruns to complete");
    } finally {
      await clearFaults();
      await injector.release(0);
    }
    // Before, the rerun that waited for the other's receipt bought it again (another generation): six.
    expect((await simStats()).billed).toBe(3);
  });

  it("reruns with the flags given, hides another org's run, and validates the body", async () => {
    const runId = await startRun("test-map", { rows: rowsOf("flags", 3) });
    await waitForRun(runId);
    await simReset();
    const refresh = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST", json: { forceToolRefresh: true } });
    expect(refresh.status).toBe(202);
    expect((await waitForRun(refresh.body.runId)).status).toBe("completed");
    // forceToolRefresh re-bills the three calls; a plain rerun reuses everything.
    expect((await simStats()).billed).toBe(3);
    const plain = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST", body: "" });
    expect(plain.status).toBe(202);
    await waitForRun(plain.body.runId);
    expect((await simStats()).billed).toBe(3);

    const theirs = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST", token: "other-token" });
    expect(theirs.status).toBe(404);
    expect(theirs.body.error.code).toBe("run_not_found");
    for (const json of [{ force: "yes" }, { play: "test-map" }]) {
      const bad = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST", json });
      expect(bad.status, JSON.stringify(json)).toBe(400);
      expect(bad.body.error.code).toBe("invalid_request");
    }
    expect((await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST", body: "{nope" })).status).toBe(400);
  });
});

describe("Idempotency-Key on POST /v1/runs", () => {
  const submitKeyed = (key: string | null, input: unknown, token?: string) =>
    apiJson("/v1/runs", {
      method: "POST",
      json: { play: "test-map", input },
      token,
      headers: key === null ? {} : { "Idempotency-Key": key },
    });

  it("returns the same run for the same key and org, and a different one for another org", async () => {
    const input = { rows: rowsOf("idem", 2) };
    const first = await submitKeyed("order-42", input);
    const again = await submitKeyed("order-42", input);
    expect(first.status).toBe(202);
    expect(again.status).toBe(202);
    expect(again.body.runId).toBe(first.body.runId);
    const otherOrg = await submitKeyed("order-42", input, "other-token");
    expect(otherOrg.status).toBe(202);
    expect(otherOrg.body.runId).not.toBe(first.body.runId);
    const withoutKey = await submitKeyed(null, input);
    expect(withoutKey.body.runId).not.toBe(first.body.runId);
    await waitForRun(first.body.runId);
    const afterwards = await submitKeyed("order-42", input);
    expect(afterwards.body).toMatchObject({ runId: first.body.runId, status: "completed" });
    const listed = (await apiJson("/v1/runs?limit=200")).body.runs.filter((r: any) => r.runId === first.body.runId);
    expect(listed).toHaveLength(1);
  });

  it("starts one run for concurrent submits with one key", async () => {
    const input = { rows: rowsOf("race", 2) };
    const before = (await apiJson("/v1/runs?limit=200")).body.runs.length;
    const answers = await Promise.all(Array.from({ length: 8 }, () => submitKeyed("race-key", input)));
    expect(answers.map((a) => a.status)).toEqual(Array(8).fill(202));
    expect(new Set(answers.map((a) => a.body.runId)).size).toBe(1);
    await waitForRun(answers[0]!.body.runId);
    expect((await apiJson("/v1/runs?limit=200")).body.runs.length).toBe(before + 1);
  });

  it("takes a rerun under the key of the submit it reruns as a different request (it answered the first run back, rerunning nothing)", async () => {
    const input = { rows: rowsOf("rerun-key", 2) };
    const first = await submitKeyed("import-2026-12-01", input);
    await waitForRun(first.body.runId);
    const rerun = (key: string) => apiJson(`/v1/runs/${first.body.runId}/rerun`, { method: "POST", headers: { "Idempotency-Key": key } });
    const reused = await rerun("import-2026-12-01");
    expect(reused.status).toBe(409);
    expect(reused.body.error.code).toBe("idempotency_key_reused");
    const again = await rerun("rerun-2026-12-01");
    expect(again.status).toBe(202);
    expect(again.body).toMatchObject({ rerunOf: first.body.runId });
    expect(again.body.runId).not.toBe(first.body.runId);
    expect((await rerun("rerun-2026-12-01")).body.runId).toBe(again.body.runId);
    await waitForRun(again.body.runId);
  });

  it("stands for its run for seven days: a key older than that is taken anew (a daily job with a fixed key got its first run)", async () => {
    const org = env.ORG_DIRECTORY.getByName(`org-keys-${crypto.randomUUID()}`);
    const day = 24 * 3600_000;
    const claim = (runId: string, now: number) => org.claimIdempotencyKey({ key: "nightly-import", fingerprint: "f", runId, now });
    const t0 = Date.now();
    expect(await claim("run_a", t0)).toMatchObject({ runId: "run_a", created: true });
    expect(await claim("run_b", t0 + 6 * day)).toMatchObject({ runId: "run_a", created: false });
    expect(await claim("run_c", t0 + 8 * day)).toMatchObject({ runId: "run_c", created: true });
  });

  it("takes the same file uploaded again as the same request: the run it started, the new upload named unused", async () => {
    const p = crypto.randomUUID().slice(0, 8);
    const file = `id,name,domain\n${p}-1,Ada ${p},example.com\n${p}-2,Grace ${p},example.com\n`;
    const upload = async (text: string) => {
      const answer = await api("/v1/uploads", { method: "POST", body: text, headers: { "Content-Type": "text/csv" } });
      expect(answer.status).toBe(201);
      return (await answer.json()) as { uploadId: string; sha256: string };
    };
    const [a, b] = [await upload(file), await upload(file)];
    expect(a.uploadId).not.toBe(b.uploadId);
    expect(a.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(b.sha256).toBe(a.sha256);
    const submit = (uploadId: string) =>
      apiJson("/v1/runs", {
        method: "POST",
        json: { play: "demo-enrich", input: { rows: { upload: uploadId } } },
        headers: { "Idempotency-Key": `file-${p}` },
      });
    const first = await submit(a.uploadId);
    expect(first.status).toBe(202);
    expect(first.body.unusedUpload).toBeUndefined();
    const again = await submit(b.uploadId);
    expect(again.status).toBe(202);
    expect(again.body).toMatchObject({ runId: first.body.runId, unusedUpload: b.uploadId });
    // A plain retry, with the run's own upload: told nothing (deleting it would fail the run).
    const retry = await submit(a.uploadId);
    expect(retry.body.runId).toBe(first.body.runId);
    expect(retry.body.unusedUpload).toBeUndefined();
    // Another file under the key is another request; so are the same bytes read as another format.
    const other = await submit((await upload(file.replace("Ada", "Alan"))).uploadId);
    expect(other.status).toBe(409);
    expect(other.body.error.code).toBe("idempotency_key_reused");
    const both = "{}\n{}\n";
    const asCsv = await api("/v1/uploads", { method: "POST", body: both, headers: { "Content-Type": "text/csv" } });
    const asNdjson = await api("/v1/uploads", { method: "POST", body: both, headers: { "Content-Type": "application/x-ndjson" } });
    const keyed = async (answer: Response, key: string) =>
      apiJson("/v1/runs", {
        method: "POST",
        json: { play: "demo-enrich", input: { rows: { upload: ((await answer.json()) as { uploadId: string }).uploadId } } },
        headers: { "Idempotency-Key": key },
      });
    expect((await keyed(asCsv, `format-${p}`)).status).toBe(202);
    expect((await keyed(asNdjson, `format-${p}`)).status).toBe(409);
    expect((await waitForRun(first.body.runId)).status).toBe("completed");
  });

  it("refuses a key reused for a different request with 409", async () => {
    const first = await submitKeyed("reused-key", { rows: rowsOf("r1", 1) });
    expect(first.status).toBe(202);
    const other = await submitKeyed("reused-key", { rows: rowsOf("r2", 1) });
    expect(other.status).toBe(409);
    expect(other.body.error.code).toBe("idempotency_key_reused");
    await waitForRun(first.body.runId);
  });

  describe("a submit that spells out a default", () => {
    // test-map's input as its schema fills it in, so that a fingerprint computed here is the server's.
    const inputOf = (prefix: string) => ({ rows: rowsOf(prefix, 2), keyMode: "field", onRowError: "continue" });
    const keyed = (key: string, input: unknown, limits: object) =>
      apiJson("/v1/runs", { method: "POST", json: { play: "test-map", input, ...limits }, headers: { "Idempotency-Key": key } });
    const spelledOut = { retryUnknown: false, timeoutSeconds: 24 * 3600, force: false, forceToolRefresh: false };

    it("is the same request as one that leaves it out, either way round; another value is not", async () => {
      const input = inputOf("defaults");
      const bare = await keyed("defaults-bare", input, {});
      expect(bare.status).toBe(202);
      for (const limits of [spelledOut, { retryUnknown: false }, { timeoutSeconds: 24 * 3600 }]) {
        const retry = await keyed("defaults-bare", input, limits);
        expect(retry.status, JSON.stringify(limits)).toBe(202);
        expect(retry.body.runId).toBe(bare.body.runId);
      }
      const spelled = await keyed("defaults-spelled", input, spelledOut);
      expect((await keyed("defaults-spelled", input, {})).body.runId).toBe(spelled.body.runId);
      for (const limits of [{ retryUnknown: true }, { timeoutSeconds: 3600 }, { maxSpend: 5 }]) {
        const other = await keyed("defaults-bare", input, limits);
        expect(other.status, JSON.stringify(limits)).toBe(409);
        expect(other.body.error.code).toBe("idempotency_key_reused");
      }
      // A rerun's default too (its limit is its source's).
      await waitForRun(bare.body.runId);
      const rerun = (json: object) =>
        apiJson(`/v1/runs/${bare.body.runId}/rerun`, { method: "POST", json, headers: { "Idempotency-Key": "defaults-rerun" } });
      const first = await rerun({});
      expect(first.status).toBe(202);
      expect((await rerun({ retryUnknown: false, timeoutSeconds: 24 * 3600 })).body.runId).toBe(first.body.runId);
      await Promise.all([spelled, first].map((r) => waitForRun(r.body.runId)));
    });

    it("still matches keys already stored, whether their request left the defaults out or spelled them out", async () => {
      const input = inputOf("stored");
      const claim = async (key: string, limits: unknown[]) => {
        const runId = `run_${crypto.randomUUID().replaceAll("-", "")}`;
        const fingerprint = await sha256Hex(canonicalJson(["test-map", input, false, false, ...limits]));
        await env.ORG_DIRECTORY.getByName("dev").claimIdempotencyKey({ key, fingerprint, runId, now: Date.now() });
        return runId;
      };
      const bare = await claim("stored-bare", []);
      expect((await keyed("stored-bare", input, spelledOut)).body.runId).toBe(bare);
      const spelled = await claim("stored-spelled", [
        { timeoutSeconds: 24 * 3600, testPolicy: null },
        { maxSpend: null, retryUnknown: false },
      ]);
      expect((await keyed("stored-spelled", input, spelledOut)).body.runId).toBe(spelled);
      await Promise.all([bare, spelled].map((runId) => waitForRun(runId)));
    });
  });

  it("validates the header before creating anything", async () => {
    const before = (await apiJson("/v1/runs?limit=200")).body.runs.length;
    for (const key of ["", "x".repeat(201), "tab\there"]) {
      const res = await api("/v1/runs", {
        method: "POST",
        json: { play: "test-map", input: { rows: [] } },
        headers: { "Idempotency-Key": key },
      });
      const body = (await res.json()) as any;
      expect(res.status, JSON.stringify(key)).toBe(400);
      expect(body.error.details).toEqual([{ path: "Idempotency-Key", message: expect.any(String) }]);
    }
    expect((await submitKeyed("x".repeat(200), { rows: [] })).status).toBe(202);
    expect((await apiJson("/v1/runs?limit=200")).body.runs.length).toBe(before + 1);
  });
});
