#!/usr/bin/env node
// npm run chaos: a black-box crash test. Starts the local server with state on
// disk, submits a 1,000-row run, kills the server (SIGKILL, the whole process
// group) mid-run, restarts it on the same state, and checks that the run
// completes with every row right, every provider call billed once, and no call
// sent twice with a billed key (duplicates 0: a call the killed process had
// sent is recovered from the provider, not repeated).
// CHAOS_LATENCY_MS (30) and CHAOS_RATE (none) set the simulated provider.
// Only ever talks to 127.0.0.1; bounded in time; stops by itself.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { client, startServer, stopServer } from "./local-server.mjs";

const PORT = Number(process.env.CHAOS_PORT ?? 8798);
// The simulated provider's latency, and its rate limit per second (none by default).
const LATENCY_MS = Number(process.env.CHAOS_LATENCY_MS ?? 30);
const RATE = process.env.CHAOS_RATE ? Number(process.env.CHAOS_RATE) : null;
const ROWS = 1000;
const TIMEOUT_MS = 5 * 60_000;
const call = client(PORT);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const email = (name, domain) => `${name.replace(/\s+/g, ".").toLowerCase()}@${domain.toLowerCase()}`;
const verdict = (e) => ([...e].reduce((s, ch) => s + ch.charCodeAt(0), 0) % 3 !== 0 ? "valid" : "invalid");

const stateDir = mkdtempSync(join(tmpdir(), "troupe-chaos-"));
let server = await startServer({ port: PORT, stateDir });
const failures = [];
try {
  await call("PUT", "/v1/sim/config", { latencyMs: LATENCY_MS, ratePerSecond: RATE });
  await call("POST", "/v1/sim/reset");
  const rows = Array.from({ length: ROWS }, (_, i) => ({ id: `c${i}`, name: `Chaos Person ${i}`, domain: `chaos${i % 13}.example` }));
  const { runId } = await call("POST", "/v1/runs", { play: "demo-enrich", input: { rows } });
  const started = Date.now();
  let before;
  for (;;) {
    before = await call("GET", `/v1/runs/${runId}`);
    const done = before.progress.maps.leads?.completed ?? 0;
    if (done >= ROWS * 0.2 || (before.status !== "running" && before.status !== "queued")) break;
    if (Date.now() - started > TIMEOUT_MS) throw new Error("the run made no progress");
    await sleep(20);
  }
  console.log(`killing the server (SIGKILL) with the run ${before.status} at ${before.progress.maps.leads?.completed ?? 0}/${ROWS} rows`);
  if (before.status !== "running") failures.push(`the run was already ${before.status} before the kill; raise ROWS or latency`);
  await stopServer(server, "SIGKILL");
  await sleep(500);
  server = await startServer({ port: PORT, stateDir });
  console.log("restarted on the same state; waiting for the run to resume by itself");

  let run;
  for (;;) {
    run = await call("GET", `/v1/runs/${runId}`);
    if (["completed", "failed", "cancelled"].includes(run.status)) break;
    if (Date.now() - started > TIMEOUT_MS) throw new Error(`the run did not finish: ${JSON.stringify(run.progress)}`);
    await sleep(100);
  }
  if (run.status !== "completed") failures.push(`the run ended ${run.status}: ${JSON.stringify(run.error)}`);
  const stored = [];
  for (let offset = 0; offset < ROWS; offset += 1000)
    stored.push(...(await call("GET", `/v1/runs/${runId}/datasets/leads?offset=${offset}&limit=1000`)).rows);
  if (stored.length !== ROWS) failures.push(`${stored.length} rows persisted, expected ${ROWS}`);
  stored.forEach((row, i) => {
    const e = email(rows[i].name, rows[i].domain);
    if (row._key !== rows[i].id || row._status !== "completed" || row.email !== e || row.verdict !== verdict(e)) {
      if (failures.length < 10) failures.push(`row ${i} is wrong: ${JSON.stringify(row)}`);
    }
  });
  const stats = await call("GET", "/v1/sim/stats");
  const unique = ROWS + new Set(rows.map((r) => email(r.name, r.domain))).size;
  if (stats.billed !== unique) failures.push(`billed ${stats.billed}, expected ${unique} unique calls`);
  if (stats.duplicates !== 0) failures.push(`${stats.duplicates} calls were sent again with an already-billed idempotency key; expected 0`);
  console.log(
    `run ${run.status} after the crash with runAttempt ${run.runAttempt}; ${stored.length} rows; billed ${stats.billed} of ${unique} unique calls; ` +
      `${stats.duplicates} calls repeated with an already-billed idempotency key`,
  );
} finally {
  await stopServer(server, "SIGKILL");
  rmSync(stateDir, { recursive: true, force: true });
}
if (failures.length) {
  console.error(`chaos: FAILED\n- ${failures.join("\n- ")}`);
  process.exit(1);
}
console.log("chaos: passed");
