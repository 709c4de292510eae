// The baselines of npm run bench, on the bench-only Worker (bench/wrangler.toml,
// bench/worker.ts) with its own simulated provider, configured as for Troupe:
// per latency, a Promise.all pool in one invocation under the emulated limits
// and without them, and a Cloudflare Workflow with one step.do per row (run by
// wrangler dev's local Workflows, under the emulated limits). Each makes per
// row the two calls demo-enrich makes (find, then verify, unbatched), over
// enough rows to last `seconds` at the bound, and is stopped after `seconds`.
// Only ever talks to 127.0.0.1.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { benchRows, configureProvider, peakPerCaller } from "./bench-troupe.mjs";
import { client, startServer, stopServer } from "./local-server.mjs";

const CONFIG = join(dirname(fileURLToPath(import.meta.url)), "..", "bench", "wrangler.toml");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** What the provider saw over one baseline's window. */
function measured(stats, seconds, extra) {
  const admitted = stats.calls - stats.rateLimited;
  return {
    seconds,
    requests: stats.calls,
    admitted,
    rateLimited: stats.rateLimited,
    requestsPerSecond: admitted / seconds,
    peakInFlightPerCaller: peakPerCaller(stats),
    duplicates: stats.duplicates,
    ...extra,
  };
}

async function poolCase(call, { rows, concurrency, limits, seconds, keyPrefix }) {
  const started = performance.now();
  const answer = await call("POST", "/pool", { rows, concurrency, limits, seconds, keyPrefix });
  const elapsed = (performance.now() - started) / 1000;
  return measured(await call("GET", "/v1/sim/stats"), elapsed, { rows: rows.length, rowsDone: answer.rows, error: answer.error });
}

/** Runs one instance until it completes, or stops it after `seconds` (the provider's counters taken first). */
async function workflowCase(call, { rows, concurrency, seconds, keyPrefix }) {
  const started = performance.now();
  const { id } = await call("POST", "/workflows", { rows, concurrency, limits: "emulate", keyPrefix });
  for (;;) {
    const { status, error } = await call("GET", `/workflows/${id}`);
    const elapsed = (performance.now() - started) / 1000;
    if (["complete", "errored", "terminated"].includes(status)) {
      return measured(await call("GET", "/v1/sim/stats"), elapsed, { status, error: error?.message ?? null });
    }
    if (elapsed > seconds) {
      const stats = await call("GET", "/v1/sim/stats");
      await call("POST", `/workflows/${id}/terminate`);
      return measured(stats, elapsed, { status: "stopped", error: null });
    }
    await sleep(500);
  }
}

/**
 * Per latency: `pool` (emulated limits), `poolNoLimits`, `workflows`. `seconds`: each baseline's window;
 * rows enough to last it at the bound (`rate`, two requests per row).
 */
export async function benchBaselines({ port, rate, concurrency, latencies, seconds, verbose }) {
  const stateDir = mkdtempSync(join(tmpdir(), "troupe-bench-baselines-"));
  const server = await startServer({ port, stateDir, verbose, config: CONFIG });
  const call = client(port);
  const rowCount = Math.ceil((rate * seconds) / 2);
  try {
    const results = [];
    for (const latencyMs of latencies) {
      const result = { latencyMs, rows: rowCount };
      const variants = [
        [
          "pool",
          (keyPrefix) => poolCase(call, { rows: benchRows(keyPrefix, rowCount), concurrency, limits: "emulate", seconds, keyPrefix }),
        ],
        [
          "poolNoLimits",
          (keyPrefix) => poolCase(call, { rows: benchRows(keyPrefix, rowCount), concurrency, limits: "off", seconds, keyPrefix }),
        ],
        ["workflows", (keyPrefix) => workflowCase(call, { rows: benchRows(keyPrefix, rowCount), concurrency, seconds, keyPrefix })],
      ];
      for (const [name, run] of variants) {
        await configureProvider(call, { latencyMs, rate, concurrency });
        result[name] = await run(`${name}-${latencyMs}`);
        if (verbose) console.error(JSON.stringify({ latencyMs, [name]: result[name] }));
      }
      results.push(result);
    }
    return results;
  } finally {
    await stopServer(server);
    rmSync(stateDir, { recursive: true, force: true });
  }
}
