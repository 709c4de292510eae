#!/usr/bin/env node
// npm run bench: the demo play over 2,000 rows against the simulated provider
// (50 ms latency), on a local server with fresh on-disk state. Prints rows per
// second and Durable Object RPCs per row. Only ever talks to 127.0.0.1.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const PORT = Number(process.env.BENCH_PORT ?? 8799);
const BASE = `http://127.0.0.1:${PORT}`;
const ROWS = Number(process.env.BENCH_ROWS ?? 2000);
const LATENCY_MS = Number(process.env.BENCH_LATENCY_MS ?? 50);
const AUTH = { Authorization: "Bearer dev-token", "Content-Type": "application/json" };
const TIMEOUT_MS = 10 * 60_000;

async function startServer(stateDir) {
  const child = spawn("wrangler", ["dev", "--ip", "127.0.0.1", "--port", String(PORT), "--persist-to", stateDir, "--log-level", "warn"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
    detached: true,
  });
  child.stderr.on("data", (d) => process.env.BENCH_VERBOSE && process.stderr.write(d));
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(`${BASE}/`)).ok) return child;
    } catch {
      // Not listening yet.
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  stop(child);
  throw new Error("the local server did not start within 60 s");
}

function stop(child) {
  try {
    process.kill(-child.pid, "SIGTERM");
  } catch {
    // Already gone.
  }
}

async function call(method, path, body) {
  const res = await fetch(`${BASE}${path}`, { method, headers: AUTH, body: body === undefined ? undefined : JSON.stringify(body) });
  const json = await res.json();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

async function runToEnd(input) {
  const started = performance.now();
  const { runId } = await call("POST", "/v1/runs", { play: "demo-enrich", input });
  for (;;) {
    const run = await call("GET", `/v1/runs/${runId}`);
    if (["completed", "failed", "cancelled"].includes(run.status)) return { run, seconds: (performance.now() - started) / 1000 };
    if (performance.now() - started > TIMEOUT_MS) throw new Error(`run ${runId} did not finish: ${JSON.stringify(run.progress)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const stateDir = mkdtempSync(join(tmpdir(), "troupe-bench-"));
const server = await startServer(stateDir);
try {
  await call("PUT", "/v1/sim/config", { latencyMs: LATENCY_MS, ratePerSecond: null });
  await call("POST", "/v1/sim/reset");
  const rows = Array.from({ length: ROWS }, (_, i) => ({ id: `b${i}`, name: `Bench Person ${i}`, domain: `bench${i % 50}.example` }));
  const { run, seconds } = await runToEnd({ rows });
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
  };
  console.log(`demo-enrich, ${ROWS} rows, simulated provider latency ${LATENCY_MS} ms`);
  console.log(`  first run: ${report.rowsPerSecond} rows/s (${report.seconds} s), ${report.objectRpcsPerRow} object RPCs/row, ${report.providerRequestsPerRow} provider requests/row`);
  console.log(`  billed ${report.billed}, duplicates ${report.duplicates}`);
  console.log(`  rerun (all reused): ${report.rerunRowsPerSecond} rows/s, ${report.rerunObjectRpcsPerRow} object RPCs/row`);
  console.log(JSON.stringify(report));
} finally {
  stop(server);
  rmSync(stateDir, { recursive: true, force: true });
}
