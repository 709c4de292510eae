#!/usr/bin/env node
// npm run bench: what production would do, measured on one machine in one run.
// Under emulated platform limits (PLATFORM_LIMITS=emulate: 6 requests in
// flight per invocation or object), for each provider latency (default 50 ms,
// 500 ms, 2 s) against the simulated provider at 100 requests/s and 250 at
// once (so the bound min(R, concurrency / L) is 100 requests/s throughout):
//
//   - Troupe: demo-enrich on its own local server (scripts/bench-troupe.mjs),
//     sized to last 20 s + 20 s per second of latency at the bound and
//     cancelled at twice that (the first latency: four times); its object RPCs
//     per row by kind; a rerun of each run that completed;
//   - the baselines on the bench-only Worker (bench/, scripts/bench-baselines.mjs):
//     a Promise.all pool in one invocation with and without the limits, and a
//     Workflow with one step.do per row;
//
// then prints the table against the targets (scripts/bench-report.mjs) and one
// JSON line with every figure. The pacing bench is `npm run bench:pacing`.
// Knobs: BENCH_LATENCIES (ms, comma-separated), BENCH_CAP_FACTOR (2), BENCH_FIRST_CAP_FACTOR (4),
// BENCH_BASELINE_SECONDS (20), BENCH_RUN_SECONDS (every Troupe run's length at the bound, in place of 20 s + 20 s
// per second of latency: how a run's fixed start and end weigh with its length), BENCH_ONLY (troupe | baselines), BENCH_PORT
// (8799), BENCH_BASELINE_PORT (8797), BENCH_VERBOSE, BENCH_TIMELINE (prints each run's requests per second and
// when its chunks completed; the JSON line has them always). Only ever talks to 127.0.0.1.
import { benchBaselines } from "./bench-baselines.mjs";
import { report } from "./bench-report.mjs";
import { benchTroupe } from "./bench-troupe.mjs";

const RATE = 100;
const CONCURRENCY = 250;
const LATENCIES = (process.env.BENCH_LATENCIES ?? "50,500,2000").split(",").map(Number);
const CAP_FACTOR = Number(process.env.BENCH_CAP_FACTOR ?? 2);
const FIRST_CAP_FACTOR = Number(process.env.BENCH_FIRST_CAP_FACTOR ?? 4);
const BASELINE_SECONDS = Number(process.env.BENCH_BASELINE_SECONDS ?? 20);
const ONLY = process.env.BENCH_ONLY ?? null;
const VERBOSE = Boolean(process.env.BENCH_VERBOSE);
/** demo-enrich makes about 1.02 provider requests per row (one find, verify batched by 50). */
const REQUESTS_PER_ROW = 1.02;

/** Seconds a Troupe run lasts at the bound: long enough for its slowest start to be a small part of it. */
const RUN_SECONDS = process.env.BENCH_RUN_SECONDS ? Number(process.env.BENCH_RUN_SECONDS) : null;
const durationAt = (latencyMs) => RUN_SECONDS ?? 20 + (20 * latencyMs) / 1000;

const started = performance.now();
const troupe =
  ONLY === "baselines"
    ? []
    : await benchTroupe({
        port: Number(process.env.BENCH_PORT ?? 8799),
        rate: RATE,
        concurrency: CONCURRENCY,
        verbose: VERBOSE,
        cases: LATENCIES.map((latencyMs, i) => ({
          latencyMs,
          rows: Math.round((RATE * durationAt(latencyMs)) / REQUESTS_PER_ROW / 100) * 100,
          // The first case gives the rerun, the ledger and live figures: it has longer to complete.
          capSeconds: (i === 0 ? FIRST_CAP_FACTOR : CAP_FACTOR) * durationAt(latencyMs),
        })),
      });
const baselines =
  ONLY === "troupe"
    ? []
    : await benchBaselines({
        port: Number(process.env.BENCH_BASELINE_PORT ?? 8797),
        rate: RATE,
        concurrency: CONCURRENCY,
        latencies: LATENCIES,
        seconds: BASELINE_SECONDS,
        verbose: VERBOSE,
      });

console.log(report({ rate: RATE, concurrency: CONCURRENCY, requestsPerRow: REQUESTS_PER_ROW, troupe, baselines }));
if (process.env.BENCH_TIMELINE) {
  console.log(
    "\nWhere each Troupe run's time went (BENCH_TIMELINE): requests admitted per second, about every second; seconds at which its chunks completed.",
  );
  for (const result of troupe) {
    console.log(`  ${result.latencyMs} ms: ${result.timeline.requestsPerSecond.join(" ")}`);
    console.log(`  ${" ".repeat(String(result.latencyMs).length)}     chunks: ${result.timeline.chunksCompletedAt.join(" ")}`);
  }
}
console.log(`(bench took ${((performance.now() - started) / 1000).toFixed(0)} s)`);
const forJson = troupe.map(({ live, ...rest }) => ({
  ...rest,
  live: live && { events: live.events, eventsByType: live.eventsByType, chunkLatenciesMs: live.chunkLatenciesMs.length },
}));
console.log(JSON.stringify({ rate: RATE, concurrency: CONCURRENCY, troupe: forJson, baselines }));
