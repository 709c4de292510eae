#!/usr/bin/env node
// Pacing bench (part of npm run bench; also runnable alone): the demo play
// against a simulated provider limited to BENCH_RATE requests per second
// (default 50, latency 50 ms), once per way the provider's limit can be known:
//
//   declared      the org's pacing gate is told the limit (PUT /v1/pacing/sim)
//   retry-after   nothing declared; the provider's 429s carry Retry-After
//   none          nothing declared; bare 429s
//   ietf          nothing declared; every answer carries RateLimit-Policy and RateLimit
//   x-ratelimit   nothing declared; every answer carries X-RateLimit-*
//
// Each case gets a fresh gate (DELETE /v1/pacing/sim forgets what it learned)
// and new rows (no receipt is reused), about 1,000 provider requests; an
// unmeasured run first warms the server up. Reports per case the provider's
// admitted throughput over its busy window (first to last request) as a share
// of the limit, and the share of requests answered 429, overall and after the
// first WARMUP_S seconds. Targets: declared ≥ 90% of the limit; nothing
// declared ≥ 90% with < 2% answered 429 after the first seconds; limit
// headers < 0.5% answered 429 (overall). Also shown, not held to a target:
// the throughput until the last single call (sim_find_email), before the
// drain of verify batches that ends every run at well under the limit (the
// dispatch window, not pacing, bounds it). Only ever talks to 127.0.0.1.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { client, startServer, stopServer } from "./local-server.mjs";

const PORT = Number(process.env.BENCH_PACING_PORT ?? 8798);
const RATE = Number(process.env.BENCH_RATE ?? 50);
const ROWS = Number(process.env.BENCH_PACING_ROWS ?? 950);
const LATENCY_MS = Number(process.env.BENCH_LATENCY_MS ?? 50);
const WARMUP_S = Number(process.env.BENCH_PACING_WARMUP_S ?? 3);
const CASES = (process.env.BENCH_PACING_CASES ?? "declared,retry-after,none,ietf,x-ratelimit").split(",");
const TIMEOUT_MS = 5 * 60_000;

/** What each case sets up, and the targets it is held to. */
const SETUPS = {
  declared: { headers: "retry-after", declare: true, minShare: 0.9, max429: null, max429AfterWarmup: null },
  "retry-after": { headers: "retry-after", declare: false, minShare: 0.9, max429: null, max429AfterWarmup: 0.02 },
  none: { headers: "none", declare: false, minShare: 0.9, max429: null, max429AfterWarmup: 0.02 },
  ietf: { headers: "ietf", declare: false, minShare: 0.9, max429: 0.005, max429AfterWarmup: null },
  "x-ratelimit": { headers: "x-ratelimit", declare: false, minShare: 0.9, max429: 0.005, max429AfterWarmup: null },
};

/** One case on the running server: a fresh gate, the provider in its style, a run of new rows. */
async function runCase(call, name) {
  const setup = SETUPS[name];
  if (!setup) throw new Error(`unknown pacing case ${name}: one of ${Object.keys(SETUPS).join(", ")}`);
  await call("DELETE", "/v1/pacing/sim");
  if (setup.declare) await call("PUT", "/v1/pacing/sim", { requestsPerSecond: RATE });
  await call("POST", "/v1/sim/reset");
  await call("PUT", "/v1/sim/config", { latencyMs: LATENCY_MS, ratePerSecond: RATE, rateLimitHeaders: setup.headers });
  // The provider's window empties before the case starts.
  await new Promise((r) => setTimeout(r, 1100));
  const rows = Array.from({ length: ROWS }, (_, i) => ({
    id: `${name}-${i}`,
    name: `Paced ${name} Person ${i}`,
    domain: `paced${i % 40}.example`,
  }));

  const started = performance.now();
  const { runId } = await call("POST", "/v1/runs", { play: "demo-enrich", input: { rows } });
  // The provider's counters over time, every ~100 ms: its busy window and the 429s after the first seconds.
  const samples = [];
  let run;
  for (;;) {
    const [current, stats] = await Promise.all([call("GET", `/v1/runs/${runId}`), call("GET", "/v1/sim/stats")]);
    samples.push({ at: performance.now(), calls: stats.calls, rateLimited: stats.rateLimited, singles: stats.calls - stats.batchCalls });
    if (["completed", "failed", "cancelled"].includes(current.status)) {
      run = current;
      break;
    }
    if (performance.now() - started > TIMEOUT_MS) throw new Error(`run ${runId} did not finish: ${JSON.stringify(current.progress)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  if (run.status !== "completed") throw new Error(`${name}: run ended ${run.status}: ${JSON.stringify(run.error)}`);
  const stats = await call("GET", "/v1/sim/stats");
  const gate = (await call("GET", "/v1/pacing/sim")).state;
  const first = samples.find((s) => s.calls > 0) ?? samples[0];
  const last = samples.find((s) => s.calls === stats.calls) ?? samples.at(-1);
  const busySeconds = Math.max(0.001, (last.at - first.at) / 1000);
  // The counters as they stood WARMUP_S into the busy window.
  const warm = [...samples].reverse().find((s) => s.at <= first.at + WARMUP_S * 1000) ?? first;
  const admitted = stats.calls - stats.rateLimited;
  // The last single call: from then on only verify batches drain.
  const lastSingle = samples.find((s) => s.singles === stats.calls - stats.batchCalls) ?? last;
  const singlePhaseSeconds = Math.max(0.001, (lastSingle.at - first.at) / 1000);
  const afterWarmup = { calls: stats.calls - warm.calls, rateLimited: stats.rateLimited - warm.rateLimited };
  const result = {
    case: name,
    requests: stats.calls,
    batchCalls: stats.batchCalls,
    rateLimited: stats.rateLimited,
    rateLimitedShare: round(stats.rateLimited / stats.calls, 4),
    rateLimitedAfterWarmup: afterWarmup.rateLimited,
    rateLimitedShareAfterWarmup: round(afterWarmup.rateLimited / Math.max(1, afterWarmup.calls), 4),
    busySeconds: round(busySeconds, 2),
    runSeconds: round((performance.now() - started) / 1000, 2),
    admittedPerSecond: round(admitted / busySeconds, 1),
    shareOfLimit: round(admitted / busySeconds / RATE, 3),
    shareOfLimitBeforeDrain: round((lastSingle.calls - lastSingle.rateLimited) / singlePhaseSeconds / RATE, 3),
    maxObservedPerSecond: stats.maxObservedPerSecond,
    billed: stats.billed,
    duplicates: stats.duplicates,
    providerRetries: run.usage.providerRetries,
    runAttempt: run.runAttempt,
    gate: {
      effective: round(gate.effectiveRequestsPerSecond, 1),
      announced: gate.announcedRequestsPerSecond,
      learned: round(gate.learnedRequestsPerSecond, 1),
    },
  };
  const misses = [];
  if (result.shareOfLimit < setup.minShare) misses.push(`throughput ${(result.shareOfLimit * 100).toFixed(1)}% < ${setup.minShare * 100}%`);
  if (setup.max429 !== null && result.rateLimitedShare >= setup.max429)
    misses.push(`429s ${(result.rateLimitedShare * 100).toFixed(2)}% >= ${setup.max429 * 100}%`);
  if (setup.max429AfterWarmup !== null && result.rateLimitedShareAfterWarmup >= setup.max429AfterWarmup) {
    misses.push(`429s after ${WARMUP_S} s ${(result.rateLimitedShareAfterWarmup * 100).toFixed(2)}% >= ${setup.max429AfterWarmup * 100}%`);
  }
  result.target = [
    `>= ${setup.minShare * 100}%`,
    setup.max429 !== null ? `429 < ${setup.max429 * 100}%` : null,
    setup.max429AfterWarmup !== null ? `429 after ${WARMUP_S} s < ${setup.max429AfterWarmup * 100}%` : null,
  ]
    .filter(Boolean)
    .join(", ");
  result.verdict = misses.length === 0 ? "meets" : `MISSES (${misses.join("; ")})`;
  return result;
}

/** An unmeasured run against an unlimited provider: the first case should not pay for a cold server. */
async function warmUp(call) {
  await call("PUT", "/v1/sim/config", { latencyMs: LATENCY_MS, ratePerSecond: null });
  const rows = Array.from({ length: 200 }, (_, i) => ({ id: `warm-${i}`, name: `Warm Person ${i}`, domain: "warm.example" }));
  const { runId } = await call("POST", "/v1/runs", { play: "demo-enrich", input: { rows } });
  const deadline = performance.now() + TIMEOUT_MS;
  while (!["completed", "failed", "cancelled"].includes((await call("GET", `/v1/runs/${runId}`)).status)) {
    if (performance.now() > deadline) throw new Error(`the warm-up run ${runId} did not finish`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function round(value, digits) {
  return value === null || value === undefined ? null : Number(value.toFixed(digits));
}

/** The cases as a table, one row each. */
function table(results) {
  const header = [
    "case",
    "requests",
    "429",
    "429 %",
    `429 % after ${WARMUP_S} s`,
    "admitted/s",
    "% of limit",
    "before drain",
    "peak/s",
    "target",
    "verdict",
  ];
  const rows = results.map((r) => [
    r.case,
    String(r.requests),
    String(r.rateLimited),
    (r.rateLimitedShare * 100).toFixed(2),
    (r.rateLimitedShareAfterWarmup * 100).toFixed(2),
    r.admittedPerSecond.toFixed(1),
    (r.shareOfLimit * 100).toFixed(1),
    (r.shareOfLimitBeforeDrain * 100).toFixed(1),
    String(r.maxObservedPerSecond),
    r.target,
    r.verdict,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i].length)));
  const line = (cells) => `  ${cells.map((c, i) => c.padEnd(widths[i])).join("  ")}`.trimEnd();
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}

/** Runs the pacing bench on its own local server; returns the results per case. */
export async function benchPacing() {
  const stateDir = mkdtempSync(join(tmpdir(), "troupe-bench-pacing-"));
  const server = await startServer({ port: PORT, stateDir, verbose: Boolean(process.env.BENCH_VERBOSE) });
  const call = client(PORT);
  const results = [];
  try {
    await warmUp(call);
    for (const name of CASES) results.push(await runCase(call, name));
    console.log(
      `pacing: demo-enrich, ${ROWS} rows per case, provider limited to ${RATE} requests/s (latency ${LATENCY_MS} ms); admitted requests over the provider's busy window`,
    );
    console.log(table(results));
    for (const r of results)
      if (r.runAttempt > 0 || r.duplicates > 0) console.log(`  ${r.case}: run attempt ${r.runAttempt}, duplicates ${r.duplicates}`);
    console.log(JSON.stringify(results));
    return results;
  } finally {
    await stopServer(server);
    rmSync(stateDir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) await benchPacing();
