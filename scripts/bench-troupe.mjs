// Troupe's side of npm run bench: demo-enrich on Troupe's own local server
// (wrangler.toml, emulated platform limits), once per provider latency, against
// the simulated provider at `rate` requests/s and `concurrency` at once, both
// declared to the org's pacing gate. Each run is sized to last a given time at
// the bound and stopped (cancelled) at its cap, so that a slow Troupe still
// finishes the bench in bounded time. Every completed run is then rerun. Only
// ever talks to 127.0.0.1.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { client, startServer, stopServer } from "./local-server.mjs";

const TERMINAL = ["completed", "failed", "cancelled"];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** `count` demo-enrich rows whose ids start with `prefix` (new rows: no receipt is reused). */
export function benchRows(prefix, count) {
  return Array.from({ length: count }, (_, i) => ({
    id: `${prefix}-${i}`,
    name: `Bench ${prefix} Person ${i}`,
    domain: `bench${i % 50}.example`,
  }));
}

/** The simulated provider as every case of the bench sees it, counters zeroed and its rate window empty. */
export async function configureProvider(call, { latencyMs, rate, concurrency }) {
  await call("POST", "/v1/sim/reset");
  await call("PUT", "/v1/sim/config", { latencyMs, ratePerSecond: rate, maxConcurrent: concurrency, rateLimitHeaders: "retry-after" });
  await sleep(1100);
}

/** The largest number of requests one calling object had in flight at once. */
export function peakPerCaller(stats) {
  return Math.max(0, ...Object.values(stats.maxInFlightByCaller ?? {}));
}

/** How many objects (or invocations) called the provider. */
export function callerCount(stats) {
  return Object.keys(stats.maxInFlightByCaller ?? {}).length;
}

/**
 * Watches a run over its live WebSocket: every ledger event, and for each
 * `chunks.completed` sent live (not replayed) the milliseconds from its `at` to
 * its receipt here. The server closes the socket after the terminal event.
 */
function watch(port, runId) {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/v1/runs/${runId}/live?token=dev-token`);
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
    if (event.type === "chunks.completed" && event.seq > watcher.snapshotSeq)
      watcher.chunkLatenciesMs.push(receivedAt - Date.parse(event.at));
  });
  return watcher;
}

/**
 * Polls the run until it ends. Past `capSeconds` it takes the provider's
 * counters as they stand and cancels the run: the measured window ends there.
 * `timeline` (when given) gets the provider's admitted requests about once a
 * second: `[seconds since started, admitted so far]`.
 */
async function untilEnd(call, runId, { started, capSeconds, timeline = null }) {
  let capped = null;
  let sampledAt = 0;
  for (;;) {
    const run = await call("GET", `/v1/runs/${runId}`);
    const seconds = (performance.now() - started) / 1000;
    if (timeline && seconds - sampledAt >= 1) {
      const stats = await call("GET", "/v1/sim/stats");
      sampledAt = seconds;
      timeline.push([Number(seconds.toFixed(1)), stats.calls - stats.rateLimited]);
    }
    if (TERMINAL.includes(run.status)) return { run, seconds: capped?.seconds ?? Math.min(seconds, endedAfter(run, started)), capped };
    if (!capped && seconds > capSeconds) {
      capped = { seconds, run, stats: await call("GET", "/v1/sim/stats") };
      await call("POST", `/v1/runs/${runId}/cancel`);
    }
    if (seconds > capSeconds + 120) throw new Error(`run ${runId} did not end 120 s after its cancel: ${JSON.stringify(run.progress)}`);
    await sleep(250);
  }
}

/**
 * Seconds from `started` (a `performance.now()` before the run's POST) to the
 * run's last update, its end as the server stamped it: the poll that saw it
 * ended comes up to a quarter second and a request later.
 */
function endedAfter(run, started) {
  const seconds = (Date.parse(run.updatedAt) - (performance.timeOrigin + started)) / 1000;
  return Number.isFinite(seconds) && seconds > 0 ? seconds : Number.POSITIVE_INFINITY;
}

/** One latency: a first run (watched live when asked), and a rerun of it if it completed. */
async function troupeCase(call, { port, latencyMs, rate, concurrency, rows: rowCount, capSeconds, watchLive }) {
  await configureProvider(call, { latencyMs, rate, concurrency });
  const rows = benchRows(`t${latencyMs}`, rowCount);
  const started = performance.now();
  const { runId } = await call("POST", "/v1/runs", { play: "demo-enrich", input: { rows } });
  const watcher = watchLive ? watch(port, runId) : null;
  const admitted = [];
  const { run, seconds, capped } = await untilEnd(call, runId, { started, capSeconds, timeline: admitted });
  const stats = capped?.stats ?? (await call("GET", "/v1/sim/stats"));
  if (watcher) {
    await Promise.race([
      watcher.closed,
      sleep(30_000).then(() => Promise.reject(new Error("the live socket stayed open after the run ended"))),
    ]);
    const seqs = watcher.events.map((e) => e.seq);
    if (seqs.some((seq, i) => seq !== i + 1)) throw new Error(`the live socket skipped or repeated events: ${seqs.join(",")}`);
  }
  // A cancelled run's rows of unfinished chunks count as not computed once it ends: count them as they
  // stood when it was stopped (rows settle live, before their chunk ends).
  const settledIn = (r) => (r?.progress.maps.leads ? r.progress.maps.leads.completed + r.progress.maps.leads.failed : 0);
  const settled = Math.max(settledIn(run), settledIn(capped?.run));
  const leads = run.progress.maps.leads ?? { completed: 0, failed: 0 };
  const result = {
    latencyMs,
    rows: rowCount,
    status: run.status,
    completedRows: leads.completed,
    settledRows: settled,
    seconds,
    capped: capped !== null,
    requests: stats.calls,
    admitted: stats.calls - stats.rateLimited,
    rateLimited: stats.rateLimited,
    requestsPerSecond: (stats.calls - stats.rateLimited) / seconds,
    rowsPerSecond: settled / seconds,
    peakInFlightPerCaller: peakPerCaller(stats),
    callers: callerCount(stats),
    peakInFlight: stats.maxInFlight,
    duplicates: stats.duplicates,
    objectRpcs: run.usage.objectRpcs,
    objectRpcsByKind: run.usage.objectRpcsByKind ?? {},
    providerRequestsPerRow: settled ? run.usage.providerRequests / settled : null,
    rerun: null,
    // Where the time went: requests admitted per second, sampled about every second, and when each chunk completed.
    timeline: {
      requestsPerSecond: admitted.map(([at, total], i) => {
        const [before, then] = i === 0 ? [0, 0] : admitted[i - 1];
        return Math.round((total - then) / (at - before));
      }),
      chunksCompletedAt: await chunkCompletionTimes(call, runId, Date.parse(run.createdAt)),
    },
    live: watcher && {
      events: watcher.events.length,
      eventsByType: Object.fromEntries(Object.entries(Object.groupBy(watcher.events, (e) => e.type)).map(([t, list]) => [t, list.length])),
      chunkLatenciesMs: watcher.chunkLatenciesMs,
    },
  };
  if (run.status === "completed") result.rerun = await rerun(call, runId, seconds);
  return result;
}

/** Seconds from `createdAt` at which each of the run's chunks completed (its `chunks.completed` event), in order. */
async function chunkCompletionTimes(call, runId, createdAt) {
  const times = [];
  for (let after = 0; ; ) {
    const page = await call("GET", `/v1/runs/${runId}/events?after=${after}&limit=1000`);
    for (const event of page.events)
      if (event.type === "chunks.completed")
        for (const _ of event.chunks) times.push(Number(((Date.parse(event.at) - createdAt) / 1000).toFixed(1)));
    if (!page.nextCursor || page.events.length === 0) return times.sort((a, b) => a - b);
    after = page.nextCursor;
  }
}

/** Reruns a completed run: its time as a share of the first run's, and the provider requests it made. */
async function rerun(call, runId, firstSeconds) {
  const before = await call("GET", "/v1/sim/stats");
  const started = performance.now();
  const { runId: rerunId } = await call("POST", `/v1/runs/${runId}/rerun`, {});
  const { run, seconds } = await untilEnd(call, rerunId, { started, capSeconds: firstSeconds });
  const after = await call("GET", "/v1/sim/stats");
  return {
    status: run.status,
    seconds,
    share: seconds / firstSeconds,
    requests: after.calls - before.calls,
    objectRpcs: run.usage.objectRpcs,
  };
}

/** An unmeasured run first: the first case should not pay for a cold server. */
async function warmUp(call, { rate, concurrency }) {
  await configureProvider(call, { latencyMs: 0, rate, concurrency });
  const { runId } = await call("POST", "/v1/runs", { play: "demo-enrich", input: { rows: benchRows("warm", 200) } });
  await untilEnd(call, runId, { started: performance.now(), capSeconds: 60 });
}

/**
 * Runs Troupe's cases on its own server, one per latency. `cases`: `[{ latencyMs, rows, capSeconds }]`.
 * The first case is watched over the live socket.
 */
export async function benchTroupe({ port, rate, concurrency, cases, verbose }) {
  const stateDir = mkdtempSync(join(tmpdir(), "troupe-bench-"));
  const server = await startServer({ port, stateDir, verbose });
  const call = client(port);
  try {
    // The provider's limits, declared as a user would declare their plan's.
    await call("PUT", "/v1/pacing/sim", { requestsPerSecond: rate, concurrency });
    await warmUp(call, { rate, concurrency });
    const results = [];
    for (const [i, c] of cases.entries()) {
      results.push(await troupeCase(call, { port, rate, concurrency, ...c, watchLive: i === 0 }));
      if (verbose) console.error(JSON.stringify(results.at(-1)));
    }
    return results;
  } finally {
    await stopServer(server);
    rmSync(stateDir, { recursive: true, force: true });
  }
}
