/**
 * An upload is not deduplicated: a key may repeat, in chunks that run at once.
 * A chunk that finds the key leased by another chunk of its own run (same
 * epoch) runs again as soon as that pass ends, without waiting out the lease
 * and without spending a blocked retry. Leases here last ten minutes: a run
 * that waited for one would not end within the test's timeout.
 */
import { afterEach, describe, expect, it } from "vitest";
import { allEvents, apiJson, datasetRows, expectedEmail, expectedVerdict, simReset, simStats, startRun, waitForRun } from "./helpers";
import { logLines, SIM_DEFAULTS, setSim } from "./chaos-helpers";

afterEach(async () => {
  await setSim(SIM_DEFAULTS);
});

interface Lead {
  id: string;
  name: string;
  domain: string;
}

const LONG_LEASE_MS = 600_000;
const csvOf = (rows: Lead[]) => `id,name,domain\n${rows.map((r) => `${r.id},${r.name},${r.domain}`).join("\n")}\n`;

async function upload(rows: Lead[]): Promise<string> {
  const { status, body } = await apiJson("/v1/uploads", { method: "POST", body: csvOf(rows), headers: { "Content-Type": "text/csv" } });
  expect(status, JSON.stringify(body)).toBe(201);
  return body.uploadId as string;
}

/** Each stored row is its own input's, enriched by the simulator's rules. */
function expectEnriched(stored: any[], rows: Lead[]): void {
  expect(stored.map((r) => r._key)).toEqual(rows.map((r) => r.id));
  stored.forEach((row, i) => {
    const lead = rows[i]!;
    expect(row._status, `row ${i} (${row._key}): ${row._error}`).toBe("completed");
    expect(row.name, `row ${i}`).toBe(lead.name);
    const email = expectedEmail(lead.name, lead.domain);
    expect(row.email, `row ${i}`).toBe(email);
    expect(row.verdict, `row ${i}`).toBe(expectedVerdict(email));
  });
}

const ownLeaseLines = (lines: string[]) => lines.filter((line) => line.includes("leased by other attempts of this run"));

/** Runs demo-enrich over `rows` as an upload, with leases of ten minutes; it must complete with every row stored. */
async function runUpload(rows: Lead[], blockedRetries: number): Promise<string> {
  const runId = await startRun(
    "demo-enrich",
    { upload: await upload(rows) },
    { testPolicy: { rowLeaseTtlMs: LONG_LEASE_MS, blockedRetries } },
  );
  const run = await waitForRun(runId, { timeoutMs: 50_000 });
  expect(run.status, JSON.stringify(run.error)).toBe("completed");
  expect(run.result).toEqual({ rows: rows.length, failed: 0 });
  expect(run.progress.maps.leads).toMatchObject({ total: rows.length, completed: rows.length, failed: 0, blocked: 0 });
  // Each place of a key holds the version computed from its own input (the run's view names one per place).
  expectEnriched(await datasetRows(runId, "leads"), rows);
  return runId;
}

/** `count` leads, the places `shared` holding one key (`<prefix>…-shared`), each place with an input of its own. */
function sharedKeyLeads(prefix: string, count: number, shared: number[]): Lead[] {
  const p = `${prefix}${crypto.randomUUID().slice(0, 6)}`;
  const rows: Lead[] = Array.from({ length: count }, (_, i) => ({ id: `${p}-${i}`, name: `${p} Person ${i}`, domain: "dup.example" }));
  shared.forEach((at, n) => {
    rows[at] = { id: `${p}-shared`, name: `${p} Shared ${n}`, domain: "dup.example" };
  });
  return rows;
}

/** A place of the shared key in each of 7 chunks of 50. */
const SEVEN_CHUNKS = Array.from({ length: 7 }, (_, c) => c * 50 + 5);

describe("a key repeated across chunks of one upload", () => {
  it("the same input in two chunks that run at once: the run completes without waiting a lease or spending a blocked retry", async () => {
    await simReset();
    // Slow enough that both chunks claim their rows before either stores them.
    await setSim({ ...SIM_DEFAULTS, latencyMs: 200 });
    const p = `same${crypto.randomUUID().slice(0, 6)}`;
    const rows: Lead[] = Array.from({ length: 100 }, (_, i) => ({ id: `${p}-${i}`, name: `${p} Person ${i}`, domain: "dup.example" }));
    rows[60] = { ...rows[10]! };
    // No blocked retry allowed: a block counted as one would fail the run `rows_blocked`.
    const runId = await runUpload(rows, 0);
    // The second chunk did find the key leased by the first (else this test proves nothing).
    expect(ownLeaseLines(await logLines(runId)).length).toBeGreaterThan(0);
    // The repeated row reused its twin's calls: nothing was billed twice.
    expect((await simStats()).duplicates).toBe(0);
  }, 60_000);

  it("one key with a different input in each of 7 chunks: more blocks than blockedRetries, and the run completes", async () => {
    await simReset();
    await setSim({ ...SIM_DEFAULTS, latencyMs: 100 });
    const rows = sharedKeyLeads("diff", 350, SEVEN_CHUNKS);
    const runId = await runUpload(rows, 3);
    expect(ownLeaseLines(await logLines(runId)).length).toBeGreaterThan(3);
    // Only the blocked rows run again: the map's progress never goes back, and no row the run computed is counted
    // reused (no other run wrote any), so the run's computed rows, which estimates learn from, are all 350.
    const events = await allEvents(runId);
    const completed = events.flatMap((e) => (e.type === "map.progress" ? [e.completed] : []));
    expect(completed.length).toBeGreaterThan(1);
    expect(completed).toEqual([...completed].sort((a, b) => a - b));
    const chunks = events.flatMap((e) => (e.type === "chunks.completed" ? e.chunks : []));
    expect(chunks).toHaveLength(7);
    expect(chunks.map((c) => c.reused)).toEqual([0, 0, 0, 0, 0, 0, 0]);
  }, 60_000);

  it("one key with a different input in 7 chunks, run again: every place reuses its own input's version, nothing runs", async () => {
    await simReset();
    const rows = sharedKeyLeads("again", 350, SEVEN_CHUNKS);
    const first = await runUpload(rows, 3);
    const calls = (await simStats()).calls;
    const { status, body } = await apiJson(`/v1/runs/${first}/rerun`, { method: "POST", json: {} });
    expect(status, JSON.stringify(body)).toBe(202);
    const again = await waitForRun(body.runId, { timeoutMs: 50_000 });
    expect(again.status, JSON.stringify(again.error)).toBe("completed");
    expectEnriched(await datasetRows(body.runId, "leads"), rows);
    // No place of the shared key was computed again (each once had its own version), so no chunk waited on another.
    expect(ownLeaseLines(await logLines(body.runId))).toEqual([]);
    const chunks = (await allEvents(body.runId)).flatMap((e) => (e.type === "chunks.completed" ? e.chunks : []));
    expect(chunks.reduce((sum, c) => sum + c.reused, 0)).toBe(350);
    expect((await simStats()).calls).toBe(calls);
  }, 60_000);

  it("one key with a different input 5 times in one chunk: more blocks than blockedRetries, and the run completes", async () => {
    await simReset();
    const rows = sharedKeyLeads("one", 40, [3, 10, 17, 24, 31]);
    const runId = await runUpload(rows, 3);
    expect(ownLeaseLines(await logLines(runId)).length).toBe(4);
  }, 60_000);
});
