/**
 * Runs whose input is an upload (docs/api.md "Large inputs: uploads"): the
 * coordinator plans chunks from the upload's row count and stores only its
 * id; the executors read each chunk's rows from R2 when they run it, and a
 * row that does not fit the play's schema fails alone, naming its line.
 * Rerun, estimate, cancel and an executor killed while reading its rows all
 * keep their guarantees.
 */
import { afterEach, describe, expect, it } from "vitest";
import {
  allEvents,
  api,
  chunkCompletions,
  apiJson,
  datasetRows,
  expectedEmail,
  expectedVerdict,
  runView,
  simReset,
  simStats,
  startRun,
  waitForRun,
} from "./helpers";
import { MAX_ROW_BYTES } from "../src/play/define";
import { clearFaults, coordinator, faultState, logLines, setFaults, setSim, SIM_DEFAULTS, until } from "./chaos-helpers";

afterEach(async () => {
  await clearFaults();
  await setSim(SIM_DEFAULTS);
});

interface Lead {
  id: string;
  name: string;
  domain: string;
}

/**
 * `count` leads as CSV; row i is on line i + 2. Every 40th row (from 11) has
 * no id, every 40th (from 23) a domain past the play's 253 characters: both
 * fail the play's schema.
 */
function leads(prefix: string, count: number): { csv: string; rows: Lead[] } {
  const rows = Array.from({ length: count }, (_, i) => ({
    id: i % 40 === 11 ? "" : `${prefix}-${i}`,
    name: `${prefix} Person ${i}`,
    domain: i % 40 === 23 ? `${"x".repeat(300)}.com` : `example${i % 9}.com`,
  }));
  return { csv: csvOf(rows), rows };
}

const csvOf = (rows: Lead[]) => `id,name,domain\n${rows.map((r) => `${r.id},${r.name},${r.domain}`).join("\n")}\n`;

/** The run's dataset holds `rows`, in order, each completed with its email and verdict. */
async function expectEnriched(runId: string, rows: Lead[]): Promise<void> {
  const stored = await datasetRows(runId, "leads");
  expect(stored.map((row) => row._key)).toEqual(rows.map((lead) => lead.id));
  stored.forEach((row, i) => {
    const email = expectedEmail(rows[i]!.name, rows[i]!.domain);
    expect(row).toMatchObject({ _status: "completed", email, verdict: expectedVerdict(email) });
  });
}

const invalid = (i: number) => i % 40 === 11 || i % 40 === 23;

async function upload(csv: string, token?: string): Promise<string> {
  const { status, body } = await apiJson("/v1/uploads", { method: "POST", body: csv, token, headers: { "Content-Type": "text/csv" } });
  expect(status, JSON.stringify(body)).toBe(201);
  return body.uploadId as string;
}

describe("a run over an upload", () => {
  it("reads its rows chunk by chunk in executors, fails rows that do not fit alone with their line, and reruns with no call", async () => {
    await simReset();
    const { csv, rows } = leads("up", 230);
    const uploadId = await upload(csv);
    const valid = rows.filter((_, i) => !invalid(i));

    const estimate = await apiJson("/v1/runs/estimate", { method: "POST", json: { play: "demo-enrich", input: { upload: uploadId } } });
    expect(estimate.status).toBe(200);
    expect(estimate.body.rows).toEqual({ total: 230, reusable: 0, toCompute: 230 });
    expect(estimate.body.calls.sim_find_email).toEqual({ reused: 0, new: valid.length });

    const runId = await startRun("demo-enrich", { upload: uploadId });
    const run = await waitForRun(runId, { timeoutMs: 90_000 });
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    const failed = rows.length - valid.length;
    expect(run.result).toEqual({ rows: valid.length, failed });
    expect(run.progress.maps.leads).toMatchObject({ total: 230, completed: valid.length, failed });

    // The coordinator keeps the upload's id, never its rows.
    const source = await coordinator(runId).source("dev");
    expect(JSON.parse(source!.inputJson)).toEqual({ rows: { upload: uploadId } });

    const stored = await datasetRows(runId, "leads");
    expect(stored).toHaveLength(230);
    stored.forEach((row, i) => {
      const lead = rows[i]!;
      if (invalid(i)) {
        expect(row._status).toBe("failed");
        expect(row._error).toContain(`invalid_row: line ${i + 2}: `);
        expect(row._error).toContain(i % 40 === 11 ? "has no key" : "domain");
        return;
      }
      const email = expectedEmail(lead.name, lead.domain);
      expect(row).toMatchObject({ _key: lead.id, id: lead.id, _status: "completed", email, verdict: expectedVerdict(email) });
    });

    const stats = await simStats();
    const emails = new Set(valid.map((lead) => expectedEmail(lead.name, lead.domain)));
    expect(stats.duplicates).toBe(0);
    expect(stats.billed).toBe(valid.length + emails.size);
    // Executors made the calls (each read its chunks' rows itself); the coordinator made none.
    for (const caller of Object.keys(stats.maxInFlightByCaller)) expect(caller).toMatch(/^MapExecutor:/);

    const rerun = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST", json: {} });
    expect(rerun.status).toBe(202);
    const again = await waitForRun(rerun.body.runId, { timeoutMs: 90_000 });
    expect(again.status).toBe("completed");
    expect(again.result).toEqual({ rows: valid.length, failed });
    expect(again.usage.providerRequests).toBe(0);
    expect((await simStats()).billed).toBe(stats.billed);
  });

  it("reruns in sweeps: after a wholly reused chunk the next go out twenty at a time, with no call and the same rows", async () => {
    await simReset();
    const person = (prefix: string, i: number): Lead => ({
      id: `${prefix}-${i}`,
      name: `${prefix} Person ${i}`,
      domain: `example${i % 9}.com`,
    });
    const rows = Array.from({ length: 1200 }, (_, i) => person("sweep", i));
    const runId = await startRun("demo-enrich", { upload: await upload(csvOf(rows)) });
    const run = await waitForRun(runId, { timeoutMs: 90_000 });
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    const billed = (await simStats()).billed;

    const rerun = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST", json: {} });
    const again = await waitForRun(rerun.body.runId, { timeoutMs: 90_000 });
    expect(again.status).toBe("completed");
    expect(again.result).toEqual({ rows: 1200, failed: 0 });
    expect(again.progress.maps.leads).toMatchObject({ total: 1200, completed: 1200, failed: 0 });
    expect(again.usage.providerRequests).toBe(0);
    expect((await simStats()).billed).toBe(billed);
    // 24 chunks of 50 rows: the first few went out as attempts, the rest in sweeps of up to 1,000 rows.
    const byKind: Record<string, number> = again.usage.objectRpcsByKind;
    expect(byKind["executor.sweep"]).toBeGreaterThanOrEqual(1);
    expect(byKind["executor.assign"] ?? 0).toBeLessThan(24);
    const chunks = chunkCompletions(await allEvents(rerun.body.runId));
    expect(chunks.map((e) => e.chunk).sort((a, b) => a - b)).toEqual([...Array(24).keys()]);
    for (const e of chunks) expect(e).toMatchObject({ completed: 50, failed: 0, reused: 50 });
    await expectEnriched(rerun.body.runId, rows);

    // The same rows with 60 new ones among them: chunks holding new rows come back from their sweep, and only those rows are paid for.
    const added = Array.from({ length: 60 }, (_, i) => person("sweep-new", i));
    const mixed = [...rows.slice(0, 600), ...added, ...rows.slice(600)];
    const mixedRun = await waitForRun(await startRun("demo-enrich", { upload: await upload(csvOf(mixed)) }), { timeoutMs: 90_000 });
    expect(mixedRun.status, JSON.stringify(mixedRun.error)).toBe("completed");
    expect(mixedRun.result).toEqual({ rows: 1260, failed: 0 });
    expect(mixedRun.usage.objectRpcsByKind["executor.sweep"]).toBeGreaterThanOrEqual(1);
    const stats = await simStats();
    expect(stats.duplicates).toBe(0);
    expect(stats.billed).toBe(billed + added.length + new Set(added.map((lead) => expectedEmail(lead.name, lead.domain))).size);
    await expectEnriched(mixedRun.runId, mixed);
  });

  it("sweeps a rerun of an upload keyed by a function of the row, taking the key from the play", async () => {
    await simReset();
    const rows = Array.from({ length: 600 }, (_, i) => ({ name: `Keyed Person ${i}`, domain: `keyed${i % 7}.test` }));
    const uploadId = await upload(`name,domain\n${rows.map((r) => `${r.name},${r.domain}`).join("\n")}\n`);
    const first = await waitForRun(await startRun("test-keyed-rows", { upload: uploadId }), { timeoutMs: 90_000 });
    expect(first.status, JSON.stringify(first.error)).toBe("completed");
    expect(first.result).toEqual({ total: 600, completed: 600, failed: 0 });
    const billed = (await simStats()).billed;
    expect(billed).toBe(600);

    const again = await waitForRun(await startRun("test-keyed-rows", { upload: uploadId }), { timeoutMs: 90_000 });
    expect(again.status, JSON.stringify(again.error)).toBe("completed");
    expect(again.result).toEqual({ total: 600, completed: 600, failed: 0 });
    expect(again.usage.providerRequests).toBe(0);
    expect((await simStats()).billed).toBe(billed);
    // 12 chunks of 50: after the first attempts, sweeps (each replays the play once per epoch to take the key function).
    expect(again.usage.objectRpcsByKind["executor.sweep"]).toBeGreaterThanOrEqual(1);
    expect(again.usage.objectRpcsByKind["executor.assign"] ?? 0).toBeLessThan(12);
    const stored = await datasetRows(again.runId, "items");
    expect(stored.map((row) => row._key)).toEqual(rows.map((r) => `${r.domain}/${r.name}`));
    stored.forEach((row, i) => {
      expect(row).toMatchObject({ _status: "completed", email: expectedEmail(rows[i]!.name, rows[i]!.domain) });
    });
  });

  it("survives an executor killed in a sweep: its chunks run as attempts, with no call and every row", async () => {
    await simReset();
    const rows = Array.from({ length: 600 }, (_, i) => ({ id: `kill-${i}`, name: `Kill Person ${i}`, domain: `example${i % 9}.com` }));
    const uploadId = await upload(csvOf(rows));
    const first = await waitForRun(await startRun("demo-enrich", { upload: uploadId }), { timeoutMs: 90_000 });
    expect(first.status, JSON.stringify(first.error)).toBe("completed");
    const billed = (await simStats()).billed;

    // One executor at first: chunk 0 is the only attempt (read #1); every read after it is a sweep's, and the first kills its executor.
    await setFaults([{ point: "upload.read", fromCall: 2, times: 1, crash: true }]);
    const runId = await startRun("demo-enrich", { upload: uploadId }, { testPolicy: { minExecutors: 1 } });
    const again = await waitForRun(runId, { timeoutMs: 90_000 });
    expect(again.status, JSON.stringify(again.error)).toBe("completed");
    expect((await faultState()).counts[0]).toBeGreaterThanOrEqual(2);
    expect((await logLines(runId)).some((line) => /^sweep of "leads" chunks \d+–\d+ failed/.test(line))).toBe(true);
    expect(again.result).toEqual({ rows: 600, failed: 0 });
    expect(again.usage.providerRequests).toBe(0);
    expect((await simStats()).billed).toBe(billed);
    await expectEnriched(runId, rows);
  });

  it("survives an executor killed after reading its rows: each row once, each call billed once", async () => {
    await simReset();
    await setFaults([{ point: "upload.read", fromCall: 2, times: 1, crash: true }]);
    const { csv, rows } = leads("crash", 200);
    const uploadId = await upload(csv);
    const runId = await startRun("demo-enrich", { upload: uploadId });
    const run = await waitForRun(runId, { timeoutMs: 90_000 });
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    // The executor died with its second chunk read; that attempt was redispatched under a new epoch.
    expect((await faultState()).counts[0]).toBeGreaterThanOrEqual(2);
    expect(run.runAttempt).toBeGreaterThanOrEqual(1);
    const stored = await datasetRows(runId, "leads");
    expect(stored.map((row) => row._key)).toEqual(
      rows.map((lead, i) => (invalid(i) && i % 40 === 11 ? `#line:${i + 2}:${uploadId}` : lead.id)),
    );
    const valid = rows.filter((_, i) => !invalid(i));
    const stats = await simStats();
    expect(stats.duplicates).toBe(0);
    expect(stats.billed).toBe(valid.length + new Set(valid.map((lead) => expectedEmail(lead.name, lead.domain))).size);
  });

  it("stops spending when cancelled, and a rerun finishes the rest without paying twice", async () => {
    await simReset();
    await setSim({ ...SIM_DEFAULTS, latencyMs: 100 });
    const { csv, rows } = leads("cancel", 200);
    const runId = await startRun("demo-enrich", { upload: await upload(csv) });
    await until(
      () => runView(runId),
      (run) => (run.progress.maps.leads?.completed ?? 0) >= 20,
      "20 rows done",
      60_000,
    );
    expect((await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" })).status).toBe(202);
    const cancelled = await waitForRun(runId, { timeoutMs: 60_000 });
    expect(cancelled.status).toBe("cancelled");
    const atCancel = (await simStats()).billed;
    await setSim(SIM_DEFAULTS);

    const rerun = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST", json: {} });
    const done = await waitForRun(rerun.body.runId, { timeoutMs: 90_000 });
    expect(done.status).toBe("completed");
    const valid = rows.filter((_, i) => !invalid(i));
    const stats = await simStats();
    expect(stats.duplicates).toBe(0);
    expect(stats.billed).toBe(valid.length + new Set(valid.map((lead) => expectedEmail(lead.name, lead.domain))).size);
    expect(stats.billed).toBeGreaterThanOrEqual(atCancel);
  });

  it("reads an upload's rows in the coordinator too, where a map's chunks run there", async () => {
    await simReset();
    const { csv, rows } = leads("inline", 120);
    const runId = await startRun("demo-enrich", { upload: await upload(csv) }, { testPolicy: { maxExecutors: 0 } });
    const run = await waitForRun(runId, { timeoutMs: 60_000 });
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    const valid = rows.filter((_, i) => !invalid(i));
    expect(run.result).toEqual({ rows: valid.length, failed: rows.length - valid.length });
    const stored = await datasetRows(runId, "leads");
    expect(stored.filter((row) => row._status === "completed").map((row) => row._key)).toEqual(valid.map((lead) => lead.id));
    const stats = await simStats();
    expect(Object.keys(stats.maxInFlightByCaller)).toEqual([`RunCoordinator:${runId}`]);
    expect(stats.duplicates).toBe(0);
  });

  it("computes a key repeated in one chunk with another input after the first: each line gets its own input's result", async () => {
    await simReset();
    const rows: Lead[] = [
      { id: "dup-1", name: "First Person", domain: "first.example" },
      { id: "dup-0", name: "Other Person", domain: "other.example" },
      { id: "dup-1", name: "Second Person", domain: "second.example" },
    ];
    const runId = await startRun("demo-enrich", { upload: await upload(csvOf(rows)) });
    const run = await waitForRun(runId, { timeoutMs: 60_000 });
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toEqual({ rows: 3, failed: 0 });
    // The run's view has each line, in file order, with what its own input gave.
    const stored = await datasetRows(runId, "leads");
    expect(stored.map((row) => [row._key, row.email])).toEqual(rows.map((lead) => [lead.id, expectedEmail(lead.name, lead.domain)]));
    expect((await simStats()).duplicates).toBe(0);
  });

  it("computes a key repeated in one chunk after its first line failed: the chunk is not blocked by itself", async () => {
    await simReset();
    const rows: Lead[] = [
      { id: "dupf-1", name: "First Person", domain: `${"x".repeat(300)}.com` },
      { id: "dupf-0", name: "Other Person", domain: "other.example" },
      { id: "dupf-1", name: "Second Person", domain: "second.example" },
    ];
    const runId = await startRun("demo-enrich", { upload: await upload(csvOf(rows)) });
    const run = await waitForRun(runId, { timeoutMs: 60_000 });
    expect(run.status, JSON.stringify(run.error)).toBe("completed");
    expect(run.result).toEqual({ rows: 2, failed: 1 });
    const stored = await datasetRows(runId, "leads");
    expect(stored.map((row) => [row._key, row._status])).toEqual([
      ["dupf-1", "failed"],
      ["dupf-0", "completed"],
      ["dupf-1", "completed"],
    ]);
    expect(stored[2]!.email).toBe(expectedEmail("Second Person", "second.example"));
  });

  it("fails the run upload_not_found when its upload is deleted while it reads it", async () => {
    await simReset();
    await setSim({ ...SIM_DEFAULTS, latencyMs: 100 });
    const { csv } = leads("deleted", 600);
    const uploadId = await upload(csv);
    // One executor reads the 12 chunks one after another (the next as the last drains): with eight, every chunk could
    // be read by the time the test sees 10 rows done, and the run would complete without reading the upload again.
    const runId = await startRun("demo-enrich", { upload: uploadId }, { testPolicy: { minExecutors: 1, maxExecutors: 1 } });
    await until(
      () => runView(runId),
      (run) => (run.progress.maps.leads?.completed ?? 0) >= 10,
      "10 rows done",
      60_000,
    );
    expect((await apiJson(`/v1/uploads/${uploadId}`, { method: "DELETE" })).status).toBe(200);
    const run = await waitForRun(runId, { timeoutMs: 60_000 });
    expect(run.status).toBe("failed");
    expect(run.error.code).toBe("upload_not_found");
    expect(run.progress.maps.leads.completed).toBeLessThan(600);
  });

  it("estimates an upload past 2,000 rows from its first 2,000, scaled to all of them", async () => {
    const { csv, rows } = leads("estimate", 5_000);
    const uploadId = await upload(csv);
    const { status, body } = await apiJson("/v1/runs/estimate", {
      method: "POST",
      json: { play: "demo-enrich", input: { upload: uploadId } },
    });
    expect(status).toBe(200);
    expect(body.rows.total).toBe(5_000);
    // 1,900 of the first 2,000 rows fit the schema (every 40th from 11 and from 23 does not): 4,750 of 5,000, scaled.
    expect(body.calls.sim_find_email.new).toBe(Math.round((1_900 * 5_000) / 2_000));
    expect(body.calls.sim_find_email.new).toBe(rows.filter((_, i) => !invalid(i)).length);
    expect(body.exact).toBe(false);
    expect(body.notes.join(" ")).toContain("estimated from its first 2000, scaled to all of them");
  });

  it("takes a file of no rows, a CSV of its header or an empty NDJSON (as an empty dataset exports), and the run completes", async () => {
    const empty = await waitForRun(await startRun("demo-enrich", { rows: [] }));
    const exported = await api(`/v1/runs/${empty.runId}/datasets/leads?format=ndjson`);
    expect(exported.status).toBe(200);
    const files: [string, string, string][] = [
      ["text/csv", "id,name,domain\n", "a CSV of its header"],
      ["application/x-ndjson", await exported.text(), "the NDJSON export of an empty dataset"],
      ["application/x-ndjson", "\n \n", "an NDJSON file of blank lines"],
    ];
    for (const [type, body, label] of files) {
      const uploaded = await apiJson("/v1/uploads", { method: "POST", body, headers: { "Content-Type": type } });
      expect(uploaded.status, `${label}: ${JSON.stringify(uploaded.body)}`).toBe(201);
      expect(uploaded.body.rows, label).toBe(0);
      const run = await waitForRun(await startRun("demo-enrich", { upload: uploaded.body.uploadId }));
      expect(run.status, label).toBe("completed");
      expect(run.result, label).toEqual({ rows: 0, failed: 0 });
    }
  });

  it("takes a CSV with unnamed columns (pandas' index, R's row names, a trailing comma), leaving them out of its rows", async () => {
    const n = crypto.randomUUID().slice(0, 8);
    const files: [string, string][] = [
      // pandas' `to_csv()` writes its index as a first column of no name.
      [`,id,name,domain\n0,pd-${n},Ada Pandas,pandas.example.com\n`, "pandas"],
      // R's `write.csv` names its row names "".
      [`"","id","name","domain"\n"1","r-${n}","Ada R","r.example.com"\n`, "R"],
      // A spreadsheet's trailing comma, beside pandas' index.
      [`,id,name,domain,\n0,tc-${n},Ada Comma,comma.example.com,\n`, "a trailing comma"],
    ];
    for (const [csv, label] of files) {
      const uploaded = await apiJson("/v1/uploads", { method: "POST", body: csv, headers: { "Content-Type": "text/csv" } });
      expect(uploaded.status, `${label}: ${JSON.stringify(uploaded.body)}`).toBe(201);
      for (const input of [{ upload: uploaded.body.uploadId }, { csv }]) {
        const started = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input } });
        expect(started.status, `${label}: ${JSON.stringify(started.body)}`).toBe(202);
        const run = await waitForRun(started.body.runId);
        expect(run.status, label).toBe("completed");
        const [row] = await datasetRows(run.runId, "leads");
        expect(Object.hasOwn(row, ""), label).toBe(false);
        expect(row.email, label).toBe(expectedEmail(row.name, row.domain));
      }
    }
    // A header of no named column at all names none: still refused.
    const unnamed = await apiJson("/v1/uploads", { method: "POST", body: ",\n1,2\n", headers: { "Content-Type": "text/csv" } });
    expect(unnamed).toMatchObject({ status: 400, body: { error: { code: "malformed_upload" } } });
  });

  it("refuses an upload that is not this org's, not ready, or not an upload id", async () => {
    const start = (input: unknown, token?: string) => apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input }, token });
    const theirs = await upload("id,name,domain\n1,A,a.com\n", "other-token");
    expect(await start({ upload: theirs })).toMatchObject({ status: 404, body: { error: { code: "upload_not_found" } } });
    const theirRun = await start({ upload: theirs }, "other-token");
    expect(theirRun.status).toBe(202);
    expect((await waitForRun(theirRun.body.runId, { token: "other-token" })).status).toBe("completed");

    const receiving = await apiJson("/v1/uploads?multipart=1", { method: "POST", headers: { "Content-Type": "text/csv" } });
    expect(await start({ upload: receiving.body.uploadId })).toMatchObject({ status: 409, body: { error: { code: "upload_not_ready" } } });
    expect(await start({ upload: "nope" })).toMatchObject({ status: 400, body: { error: { code: "invalid_request" } } });
    expect((await start({ upload: theirs, rows: [] })).status).toBe(400);

    // A deleted upload cannot be rerun.
    const mine = await upload("id,name,domain\n1,A,a.com\n");
    const runId = await startRun("demo-enrich", { upload: mine });
    expect((await waitForRun(runId)).status).toBe("completed");
    expect((await apiJson(`/v1/uploads/${mine}`, { method: "DELETE" })).status).toBe(200);
    const rerun = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST", json: {} });
    expect(rerun).toMatchObject({ status: 404, body: { error: { code: "upload_not_found" } } });
  });
});

describe("a run over CSV text in its input ({ csv })", () => {
  it("ends each row at CRLF, LF or a lone CR, whichever the first line used, leaving no CR in a cell", async () => {
    const rows = ["lf", "crlf", "cr", "last"].map((kind) => ({
      id: `inline-${kind}`,
      name: `Inline ${kind}`,
      domain: `${kind}.example.com`,
    }));
    const line = (row: Lead) => `${row.id},${row.name},${row.domain}`;
    // The header ends in LF and the next row in CRLF; then a row in a lone CR, in a second run.
    for (const [csv, expected] of [
      [`id,name,domain\n${line(rows[0]!)}\n${line(rows[1]!)}\r\n`, rows.slice(0, 2)],
      [`id,name,domain\r\n${line(rows[2]!)}\r${line(rows[3]!)}\r\n`, rows.slice(2)],
    ] as const) {
      const runId = await startRun("demo-enrich", { csv });
      expect((await waitForRun(runId)).status).toBe("completed");
      expect((await datasetRows(runId, "leads")).map((row) => row.domain)).toEqual(expected.map((row) => row.domain));
      await expectEnriched(runId, [...expected]);
    }
  });

  it("refuses with 400 a row of empty fields past the row limit however few characters its fields hold", async () => {
    // csv-parse counts a record's field characters: a megabyte of delimiters holds none, and a million empty fields.
    const delimiters = 1024 * 1024;
    for (const csv of [`id,name,domain\n1,A,a.com\n${",".repeat(delimiters)}\n`, `${",".repeat(delimiters)}\n1,A,a.com\n`]) {
      const { status, body } = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input: { csv } } });
      expect(status).toBe(400);
      expect(body.error.code).toBe("invalid_request");
      expect(body.error.details).toEqual([{ path: "input.csv", message: expect.stringContaining(`longer than ${MAX_ROW_BYTES} bytes`) }]);
    }
  });
});
