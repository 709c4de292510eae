#!/usr/bin/env node
// Pacing bench (part of npm run bench; also runnable alone): the demo play
// against a simulated provider limited to BENCH_RATE requests per second
// (default 50), with the org's pacing gate told that limit
// (PUT /v1/pacing/sim). Reports the provider throughput achieved, as a share
// of the limit, and the share of requests answered 429. Targets: at least
// 90% of the limit, fewer than 5% 429s. Only ever talks to 127.0.0.1.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { client, startServer, stopServer } from "./local-server.mjs";

const PORT = Number(process.env.BENCH_PACING_PORT ?? 8798);
const RATE = Number(process.env.BENCH_RATE ?? 50);
const ROWS = Number(process.env.BENCH_PACING_ROWS ?? 1200);
const LATENCY_MS = Number(process.env.BENCH_LATENCY_MS ?? 50);
const TIMEOUT_MS = 10 * 60_000;

/** Runs the pacing bench on its own local server; returns the report. */
export async function benchPacing() {
  const stateDir = mkdtempSync(join(tmpdir(), "troupe-bench-pacing-"));
  const server = await startServer({ port: PORT, stateDir, verbose: Boolean(process.env.BENCH_VERBOSE) });
  const call = client(PORT);
  try {
    await call("PUT", "/v1/sim/config", { latencyMs: LATENCY_MS, ratePerSecond: RATE });
    await call("PUT", "/v1/pacing/sim", { requestsPerSecond: RATE });
    await call("POST", "/v1/sim/reset");
    const rows = Array.from({ length: ROWS }, (_, i) => ({ id: `p${i}`, name: `Paced Person ${i}`, domain: `paced${i % 40}.example` }));

    const started = performance.now();
    const { runId } = await call("POST", "/v1/runs", { play: "demo-enrich", input: { rows } });
    // The provider's busy window: from the first request it saw to the last, sampled every 100 ms.
    let firstAt = null;
    let lastAt = null;
    let lastCalls = 0;
    let run;
    for (;;) {
      const [current, stats] = await Promise.all([call("GET", `/v1/runs/${runId}`), call("GET", "/v1/sim/stats")]);
      const now = performance.now();
      if (stats.calls > 0 && firstAt === null) firstAt = now;
      if (stats.calls !== lastCalls) lastAt = now;
      lastCalls = stats.calls;
      if (["completed", "failed", "cancelled"].includes(current.status)) {
        run = current;
        break;
      }
      if (now - started > TIMEOUT_MS) throw new Error(`run ${runId} did not finish: ${JSON.stringify(current.progress)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const seconds = (performance.now() - started) / 1000;
    if (run.status !== "completed") throw new Error(`run ended ${run.status}: ${JSON.stringify(run.error)}`);
    const stats = await call("GET", "/v1/sim/stats");
    const busySeconds = Math.max(0.001, ((lastAt ?? performance.now()) - (firstAt ?? started)) / 1000);
    const report = {
      rows: ROWS,
      rateLimitPerSecond: RATE,
      latencyMs: LATENCY_MS,
      seconds: Number(seconds.toFixed(2)),
      providerRequests: stats.calls,
      batchCalls: stats.batchCalls,
      rateLimited: stats.rateLimited,
      rateLimitedShare: Number((stats.rateLimited / stats.calls).toFixed(4)),
      throughputPerSecond: Number((stats.calls / busySeconds).toFixed(1)),
      throughputShareOfLimit: Number((stats.calls / busySeconds / RATE).toFixed(3)),
      wholeRunThroughputShareOfLimit: Number((stats.calls / seconds / RATE).toFixed(3)),
      maxObservedPerSecond: stats.maxObservedPerSecond,
      providerRetries: run.usage.providerRetries,
      runAttempt: run.runAttempt,
      logLines: (await call("GET", `/v1/runs/${runId}/events?limit=1000`)).events.filter((e) => e.type === "log.appended").map((e) => e.line).slice(0, 5),
      billed: stats.billed,
      duplicates: stats.duplicates,
    };
    console.log(`pacing: demo-enrich, ${ROWS} rows, provider limited to ${RATE} requests/s (latency ${LATENCY_MS} ms)`);
    console.log(`  provider throughput ${report.throughputPerSecond}/s = ${(report.throughputShareOfLimit * 100).toFixed(1)}% of the limit over its busy window (${(report.wholeRunThroughputShareOfLimit * 100).toFixed(1)}% over the whole run, ${report.seconds} s)`);
    console.log(`  ${report.providerRequests} requests (${report.batchCalls} batch calls), ${report.rateLimited} answered 429 (${(report.rateLimitedShare * 100).toFixed(2)}%), peak ${report.maxObservedPerSecond} in one second`);
    console.log(`  billed ${report.billed}, duplicates ${report.duplicates}, retries ${report.providerRetries}`);
    const verdict = report.throughputShareOfLimit >= 0.9 && report.rateLimitedShare < 0.05 ? "meets" : "MISSES";
    console.log(`  ${verdict} the targets: throughput >= 90% of the limit, < 5% of requests answered 429`);
    console.log(JSON.stringify(report));
    return report;
  } finally {
    await stopServer(server);
    rmSync(stateDir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) await benchPacing();
