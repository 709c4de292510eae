#!/usr/bin/env node
// npm run bench: the demo play over 2,000 rows against the simulated provider
// (50 ms latency), on a local server with fresh on-disk state. Prints rows per
// second and Durable Object RPCs per row; the ledger's write amplification
// (events per 1,000 rows); and, from a client watching the run over
// GET /v1/runs/<id>/live, the latency from a chunk completing (the event's
// server-stamped `at`) to the client receiving it. Only ever talks to 127.0.0.1.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServer, stopServer } from "./local-server.mjs";

const PORT = Number(process.env.BENCH_PORT ?? 8799);
const BASE = `http://127.0.0.1:${PORT}`;
const ROWS = Number(process.env.BENCH_ROWS ?? 2000);
const LATENCY_MS = Number(process.env.BENCH_LATENCY_MS ?? 50);
const AUTH = { Authorization: "Bearer dev-token", "Content-Type": "application/json" };
const TIMEOUT_MS = 10 * 60_000;

async function call(method, path, body) {
  const res = await fetch(`${BASE}${path}`, { method, headers: AUTH, body: body === undefined ? undefined : JSON.stringify(body) });
  const json = await res.json();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

/**
 * Watches a run over its live WebSocket: every ledger event, and for each
 * `chunk.completed` sent live (not replayed) the milliseconds from its `at` to
 * its receipt here. The server closes the socket after the terminal event.
 */
function watch(runId) {
  const ws = new WebSocket(`ws://127.0.0.1:${PORT}/v1/runs/${runId}/live?token=dev-token`);
  const watcher = { events: [], chunkLatenciesMs: [], snapshotSeq: null };
  watcher.closed = new Promise((resolve, reject) => {
    ws.addEventListener("close", () => resolve());
    ws.addEventListener("error", () => reject(new Error(`live socket of ${runId} failed`)));
  });
  ws.addEventListener("message", (message) => {
    const receivedAt = Date.now();
    const event = JSON.parse(message.data);
    if (event.type === "snapshot") {
      watcher.snapshotSeq = event.seq;
      return;
    }
    watcher.events.push(event);
    if (event.type === "chunk.completed" && event.seq > watcher.snapshotSeq)
      watcher.chunkLatenciesMs.push(receivedAt - Date.parse(event.at));
  });
  return watcher;
}

function percentile(values, p) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

async function runToEnd(input, options = {}) {
  const started = performance.now();
  const { runId } = await call("POST", "/v1/runs", { play: "demo-enrich", input });
  const watcher = options.watch ? watch(runId) : null;
  for (;;) {
    const run = await call("GET", `/v1/runs/${runId}`);
    if (["completed", "failed", "cancelled"].includes(run.status)) {
      const seconds = (performance.now() - started) / 1000;
      if (watcher)
        await Promise.race([
          watcher.closed,
          new Promise((_, reject) => setTimeout(() => reject(new Error("the live socket stayed open after the run ended")), 30_000)),
        ]);
      return { run, seconds, watcher };
    }
    if (performance.now() - started > TIMEOUT_MS) throw new Error(`run ${runId} did not finish: ${JSON.stringify(run.progress)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const stateDir = mkdtempSync(join(tmpdir(), "troupe-bench-"));
const server = await startServer({ port: PORT, stateDir, verbose: Boolean(process.env.BENCH_VERBOSE) });
try {
  await call("PUT", "/v1/sim/config", { latencyMs: LATENCY_MS, ratePerSecond: null });
  await call("POST", "/v1/sim/reset");
  const rows = Array.from({ length: ROWS }, (_, i) => ({ id: `b${i}`, name: `Bench Person ${i}`, domain: `bench${i % 50}.example` }));
  const { run, seconds, watcher } = await runToEnd({ rows }, { watch: true });
  if (run.status !== "completed") throw new Error(`run ended ${run.status}: ${JSON.stringify(run.error)}`);
  const stats = await call("GET", "/v1/sim/stats");
  const rerun = await runToEnd({ rows });
  const report = {
    rows: ROWS,
    latencyMs: LATENCY_MS,
    seconds: Number(seconds.toFixed(2)),
    rowsPerSecond: Math.round(ROWS / seconds),
    objectRpcsPerRow: Number((run.usage.objectRpcs / ROWS).toFixed(3)),
    providerRequestsPerRow: Number((run.usage.providerRequests / ROWS).toFixed(3)),
    billed: stats.billed,
    duplicates: stats.duplicates,
    rerunRowsPerSecond: Math.round(ROWS / rerun.seconds),
    rerunObjectRpcsPerRow: Number((rerun.run.usage.objectRpcs / ROWS).toFixed(3)),
    ledgerEvents: watcher.events.length,
    ledgerEventsPer1000Rows: Number(((watcher.events.length / ROWS) * 1000).toFixed(1)),
    ledgerEventsByType: Object.fromEntries(
      Object.entries(Object.groupBy(watcher.events, (e) => e.type)).map(([type, list]) => [type, list.length]),
    ),
    liveChunkEvents: watcher.chunkLatenciesMs.length,
    liveLatencyP50Ms: percentile(watcher.chunkLatenciesMs, 50),
    liveLatencyP95Ms: percentile(watcher.chunkLatenciesMs, 95),
    liveLatencyMaxMs: percentile(watcher.chunkLatenciesMs, 100),
  };
  const seqs = watcher.events.map((e) => e.seq);
  if (seqs.some((seq, i) => seq !== i + 1)) throw new Error(`the live socket skipped or repeated events: ${seqs.join(",")}`);
  console.log(`demo-enrich, ${ROWS} rows, simulated provider latency ${LATENCY_MS} ms`);
  console.log(
    `  first run: ${report.rowsPerSecond} rows/s (${report.seconds} s), ${report.objectRpcsPerRow} object RPCs/row, ${report.providerRequestsPerRow} provider requests/row`,
  );
  console.log(`  billed ${report.billed}, duplicates ${report.duplicates}`);
  console.log(`  rerun (all reused): ${report.rerunRowsPerSecond} rows/s, ${report.rerunObjectRpcsPerRow} object RPCs/row`);
  console.log(
    `  ledger: ${report.ledgerEvents} events, ${report.ledgerEventsPer1000Rows} per 1,000 rows (${Object.entries(report.ledgerEventsByType)
      .map(([t, n]) => `${t} ${n}`)
      .join(", ")})`,
  );
  console.log(
    `  live: chunk.completed reached a watching client in p50 ${report.liveLatencyP50Ms} ms, p95 ${report.liveLatencyP95Ms} ms, max ${report.liveLatencyMaxMs} ms (${report.liveChunkEvents} events)`,
  );
  console.log(JSON.stringify(report));
} finally {
  await stopServer(server);
  rmSync(stateDir, { recursive: true, force: true });
}

// ---- Pacing (scripts/bench-pacing.mjs): provider throughput and 429s under a rate
// limit, declared or left to the provider's signals (one case per header style),
// on its own local server after the run above.
await (await import("./bench-pacing.mjs")).benchPacing();
