// npm run bench:scale: a large upload-fed run of demo-enrich on Troupe's own local server
// (wrangler.toml, emulated platform limits), against the simulated provider at 0 ms: rows/s per
// tenth of the run, object RPCs per row, and memory over time (the local server's resident memory, its
// isolate's heap in use, and its live heap from a heap snapshot every two minutes), a CSV export of the completed run, then a rerun of it (time as a share of the first,
// provider requests made). Each size runs on a server of its own; run times are the server's (a run's creation
// to its end).
//
//   npm run bench:scale                      # 100,000 rows
//   npm run bench:scale -- --rows 1000000    # a million (long on a laptop)
//   npm run bench:scale -- --rows 100000 --rows 1000000
//
// BENCH_PORT sets the port (default 8797), BENCH_INSPECTOR_PORT the server's devtools inspector
// (default 9239). Only ever talks to 127.0.0.1.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { request } from "node:http";
import { parseArgs } from "node:util";
import WebSocket from "ws";
import { client, startServer, stopServer } from "./local-server.mjs";

const TERMINAL = ["completed", "failed", "cancelled"];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const TARGETS = { lastTenthShare: 0.8, memoryGrowth: 1.5, rerunShare: 0.05 };

const { values } = parseArgs({
  options: { rows: { type: "string", multiple: true, default: ["100000"] }, verbose: { type: "boolean", default: false } },
});
const sizes = values.rows.map((r) => Number(r));
if (sizes.some((n) => !Number.isInteger(n) || n < 1000 || n > 10_000_000)) {
  console.error("--rows takes whole numbers from 1,000 to 10,000,000");
  process.exit(2);
}
const port = Number(process.env.BENCH_PORT ?? 8797);
const inspectorPort = Number(process.env.BENCH_INSPECTOR_PORT ?? 9239);

/** The CSV of `count` new leads, streamed in pieces (a million rows are ~50 MB: never built whole). */
function leadsCsv(prefix, count) {
  let i = 0;
  const encoder = new TextEncoder();
  return new ReadableStream({
    pull(controller) {
      if (i === 0) controller.enqueue(encoder.encode("id,name,domain\n"));
      if (i >= count) return controller.close();
      const lines = [];
      for (const end = Math.min(count, i + 10_000); i < end; i++)
        lines.push(`${prefix}-${i},Scale ${prefix} Person ${i},scale${i % 97}.example\n`);
      controller.enqueue(encoder.encode(lines.join("")));
    },
  });
}

async function upload(count, prefix) {
  const res = await fetch(`http://127.0.0.1:${port}/v1/uploads`, {
    method: "POST",
    headers: { Authorization: "Bearer dev-token", "Content-Type": "text/csv" },
    body: leadsCsv(prefix, count),
    duplex: "half",
  });
  const body = await res.json();
  if (res.status !== 201) throw new Error(`upload: ${res.status} ${JSON.stringify(body)}`);
  return body;
}

/**
 * Resident memory (bytes) of the server's processes, wrangler's group: `all` of them, and `workerd`, the one
 * that runs the Worker and its objects (started with an inspector address). The rest are wrangler's own
 * development tooling (its Node process and the workerd of its HTTP and inspector proxies), which a deployed
 * Troupe does not have; they relay this bench's heap snapshots, tens of megabytes each, and keep the memory.
 */
function serverRss(groupId) {
  const rss = { all: 0, workerd: 0 };
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      // Fields after the command name: state ppid pgrp ...
      const pgrp = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
      if (pgrp !== groupId) continue;
      const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
      if (!kb) continue;
      rss.all += Number(kb[1]) * 1024;
      if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("--inspector-addr")) rss.workerd += Number(kb[1]) * 1024;
    } catch {
      // The process ended while being read.
    }
  }
  return rss;
}

/**
 * The memory of the server's isolate in use (its JS heap and array buffers), through its devtools inspector:
 * what production's 128 MB per isolate limits. Locally every object of the Worker shares this one isolate; the
 * resident memory above also holds workerd itself and every object's SQLite pages. (workerd does not answer
 * `HeapProfiler.collectGarbage`, so a sample includes garbage not yet collected.)
 */
async function openInspector() {
  const [target] = await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json();
  if (!target) throw new Error("the local server's inspector lists no isolate");
  const socket = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    socket.once("open", resolve);
    socket.once("error", reject);
  });
  let last = 0;
  const waiting = new Map();
  let snapshot = [];
  socket.on("message", (data) => {
    const message = JSON.parse(String(data));
    if (message.method === "HeapProfiler.addHeapSnapshotChunk") snapshot.push(message.params.chunk);
    waiting.get(message.id)?.(message);
    waiting.delete(message.id);
  });
  const send = (method, params = {}) =>
    new Promise((resolve) => {
      const id = ++last;
      waiting.set(id, resolve);
      socket.send(JSON.stringify({ id, method, params }));
    });
  return {
    async heapInUse() {
      const { result } = await send("Runtime.getHeapUsage");
      return result.usedSize + result.backingStorageSize;
    },
    /**
     * The heap that is live (reachable): the sum of a heap snapshot's objects, which V8 takes after a full
     * collection. Unlike `heapInUse` it does not depend on when the collector last ran; it pauses the isolate
     * for a moment, so it is sampled rarely.
     */
    async liveHeap() {
      snapshot = [];
      const { error } = await send("HeapProfiler.takeHeapSnapshot", { reportProgress: false });
      if (error) throw new Error(`heap snapshot: ${JSON.stringify(error)}`);
      const { snapshot: head, nodes } = JSON.parse(snapshot.join(""));
      snapshot = [];
      const fields = head.meta.node_fields;
      const selfSize = fields.indexOf("self_size");
      let bytes = 0;
      for (let i = selfSize; i < nodes.length; i += fields.length) bytes += nodes[i];
      return bytes;
    },
    close: () => socket.close(),
  };
}

/**
 * Calls `sample` after `firstMs`, then every `ms`, until the returned stop is called; stop resolves once the
 * sample under way (if any) has ended.
 */
function sampleEvery(ms, sample, firstMs = 0) {
  let going = true;
  let wake = () => {};
  const pause = (wait) =>
    new Promise((resolve) => {
      const timer = setTimeout(resolve, wait);
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  const loop = (async () => {
    await pause(firstMs);
    while (going) {
      await sample();
      if (going) await pause(ms);
    }
  })();
  return async () => {
    going = false;
    wake();
    await loop;
  };
}

/**
 * GET of the local API with no time limit: while a 0 ms run keeps local workerd's one thread busy, it answers
 * HTTP only between bursts of the run's in-process calls, sometimes minutes apart (fetch gives up after five).
 */
function patientGet(path) {
  return patient("GET", path);
}

/** A request of the local API with no time limit (see {@link patientGet}): a run's start answers once its first alarm lets it. */
function patient(method, path, body) {
  return new Promise((resolve, reject) => {
    const headers = { Authorization: "Bearer dev-token", ...(body === undefined ? {} : { "Content-Type": "application/json" }) };
    const req = request({ host: "127.0.0.1", port, path, method, headers }, (res) => {
      let data = "";
      res.setEncoding("utf8");
      res.on("data", (chunk) => {
        data += chunk;
      });
      res.on("end", () =>
        res.statusCode >= 200 && res.statusCode < 300
          ? resolve(JSON.parse(data))
          : reject(new Error(`${method} ${path}: ${res.statusCode} ${data}`)),
      );
    });
    req.on("error", reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/**
 * Streams the run's dataset as CSV (`GET …/datasets/<name>?format=csv`), counting its lines, while the isolate's
 * heap is sampled every 2 s: an export of any size should hold no more than a page at a time.
 */
async function exportCsv(runId, dataset, inspector) {
  const started = performance.now();
  const heap = [];
  const stopSampling = sampleEvery(2_000, async () => heap.push(await inspector.heapInUse()));
  try {
    const { bytes, lines } = await new Promise((resolve, reject) => {
      const path = `/v1/runs/${runId}/datasets/${dataset}?format=csv`;
      const req = request({ host: "127.0.0.1", port, path, headers: { Authorization: "Bearer dev-token" } }, (res) => {
        if (res.statusCode !== 200) return reject(new Error(`GET ${path}: ${res.statusCode}`));
        let bytes = 0;
        let lines = 0;
        res.on("data", (chunk) => {
          bytes += chunk.length;
          for (const byte of chunk) if (byte === 10) lines++;
        });
        res.on("end", () => resolve({ bytes, lines }));
        res.on("error", reject);
      });
      req.on("error", reject);
      req.end();
    });
    const seconds = (performance.now() - started) / 1000;
    return { rows: lines - 1, mb: bytes / 2 ** 20, seconds, rowsPerSecond: (lines - 1) / seconds, peakHeapMb: Math.max(...heap) / 2 ** 20 };
  } finally {
    await stopSampling();
  }
}

/**
 * Follows the run until it ends: the server's memory every second (read from /proc by this script), the
 * isolate's heap every 2 s, and the rows settled over time from the run's `map.progress` events. At 0 ms
 * the run's in-process calls keep local workerd's event loop so busy that its HTTP answers wait (see the
 * README): the ledger's timestamps do not.
 */
async function follow(runId, groupId, started, inspector) {
  const memory = [];
  const heap = [];
  const live = [];
  const seconds = () => (performance.now() - started) / 1000;
  const sampler = setInterval(() => memory.push({ seconds: seconds(), rss: serverRss(groupId) }), 1000);
  const stopHeap = sampleEvery(2_000, async () => heap.push({ seconds: seconds(), bytes: await inspector.heapInUse() }));
  const stopLive = sampleEvery(120_000, async () => live.push({ seconds: seconds(), bytes: await inspector.liveHeap() }), 30_000);
  let run;
  try {
    for (;;) {
      run = await patientGet(`/v1/runs/${runId}`);
      if (TERMINAL.includes(run.status)) break;
      await sleep(1000);
    }
  } finally {
    clearInterval(sampler);
  }
  await stopHeap();
  await stopLive();
  memory.push({ seconds: seconds(), rss: serverRss(groupId) });
  const progress = [];
  let endedAt = null;
  for (let after = 0; ; ) {
    const page = await patientGet(`/v1/runs/${runId}/events?after=${after}&limit=1000`);
    for (const event of page.events) {
      if (TERMINAL.some((status) => event.type === `run.${status}`)) endedAt = Date.parse(event.at);
      if (event.type === "run.started") progress.push({ at: Date.parse(event.at), settled: 0 });
      if (event.type === "map.progress") progress.push({ at: Date.parse(event.at), settled: event.completed + event.failed });
    }
    if (page.events.length < 1000) break;
    after = page.events.at(-1).seq;
  }
  const t0 = progress[0]?.at ?? 0;
  const samples = progress.map((p) => ({ seconds: (p.at - t0) / 1000, settled: p.settled }));
  if (values.verbose) console.error(JSON.stringify({ samples: samples.length, memory: memory.length }));
  // The run's own time: from its creation to its end, as the server stamped them. This script's wall time adds
  // up to a second of polling, which is 5% of a 20 s rerun.
  const runSeconds = endedAt === null ? null : (endedAt - Date.parse(run.createdAt)) / 1000;
  return { run, samples, memory, heap, live, runSeconds };
}

/** Rows/s in each tenth of the rows: from the first sample at or past each tenth's start to the one at or past its end. */
function tenths(samples, total) {
  const at = (rows) => {
    const sample = samples.find((s) => s.settled >= rows);
    return sample ? sample.seconds : null;
  };
  return Array.from({ length: 10 }, (_, k) => {
    const from = k === 0 ? 0 : at((k * total) / 10);
    const to = at(((k + 1) * total) / 10);
    return from === null || to === null || to <= from ? null : total / 10 / (to - from);
  });
}

async function scaleCase(call, groupId, inspector, count) {
  await call("POST", "/v1/sim/reset");
  await call("PUT", "/v1/sim/config", { latencyMs: 0, ratePerSecond: null, maxConcurrent: null });
  const prefix = `s${count}-${Date.now()}`;
  const uploadStarted = performance.now();
  const uploaded = await upload(count, prefix);
  const uploadSeconds = (performance.now() - uploadStarted) / 1000;
  const idleRss = serverRss(groupId);
  const idleHeap = await inspector.heapInUse();
  const idleLive = await inspector.liveHeap();
  const started = performance.now();
  const { runId } = await patient("POST", "/v1/runs", { play: "demo-enrich", input: { upload: uploaded.uploadId } });
  const { run, samples, memory, heap, live, runSeconds } = await follow(runId, groupId, started, inspector);
  const wallSeconds = (performance.now() - started) / 1000;
  const seconds = runSeconds ?? wallSeconds;
  // Once it has ended: what the run left live.
  const endLive = await inspector.liveHeap();
  const stats = await call("GET", "/v1/sim/stats");
  const rates = tenths(samples, count);
  const peakRss = { workerd: Math.max(...memory.map((s) => s.rss.workerd)), all: Math.max(...memory.map((s) => s.rss.all)) };
  const peakHeap = Math.max(...heap.map((s) => s.bytes));

  let rerun = null;
  let exported = null;
  if (run.status === "completed") {
    exported = await exportCsv(runId, "leads", inspector);
    const rerunStarted = performance.now();
    const { runId: rerunId } = await patient("POST", `/v1/runs/${runId}/rerun`, {});
    const again = await follow(rerunId, groupId, rerunStarted, inspector);
    const rerunWallSeconds = (performance.now() - rerunStarted) / 1000;
    const after = await call("GET", "/v1/sim/stats");
    const rerunSeconds = again.runSeconds ?? rerunWallSeconds;
    rerun = {
      status: again.run.status,
      seconds: rerunSeconds,
      wallSeconds: rerunWallSeconds,
      share: rerunSeconds / seconds,
      requests: after.calls - stats.calls,
    };
  }
  return {
    rows: count,
    upload: { bytes: uploaded.bytes, seconds: uploadSeconds },
    status: run.status,
    seconds,
    wallSeconds,
    rowsPerSecond: count / seconds,
    tenths: rates,
    lastTenthShare: rates[9] && rates[0] ? rates[9] / rates[0] : null,
    objectRpcsPerRow: run.usage.objectRpcs / count,
    objectRpcsByKind: Object.fromEntries(Object.entries(run.usage.objectRpcsByKind ?? {}).map(([k, v]) => [k, v / count])),
    providerRequests: stats.calls,
    duplicates: stats.duplicates,
    memory: {
      idleMb: idleRss.workerd / 2 ** 20,
      peakMb: peakRss.workerd / 2 ** 20,
      allIdleMb: idleRss.all / 2 ** 20,
      allPeakMb: peakRss.all / 2 ** 20,
      overTime: memory
        .filter((_, i) => i % 30 === 0)
        .map((s) => [Math.round(s.seconds), Math.round(s.rss.workerd / 2 ** 20), Math.round(s.rss.all / 2 ** 20)]),
    },
    live: {
      idleMb: idleLive / 2 ** 20,
      peakMb: Math.max(idleLive, ...live.map((s) => s.bytes)) / 2 ** 20,
      endMb: endLive / 2 ** 20,
      overTime: live.map((s) => [Math.round(s.seconds), Math.round(s.bytes / 2 ** 20)]),
    },
    heap: {
      idleMb: idleHeap / 2 ** 20,
      peakMb: peakHeap / 2 ** 20,
      overTime: heap.filter((_, i) => i % 15 === 0).map((s) => [Math.round(s.seconds), Math.round(s.bytes / 2 ** 20)]),
    },
    exported,
    rerun,
  };
}

/** An unmeasured small run first: the first case should not pay for a cold server. */
async function warmUp() {
  const { uploadId } = await upload(500, `warm-${Date.now()}`);
  const { runId } = await patient("POST", "/v1/runs", { play: "demo-enrich", input: { upload: uploadId } });
  while (!TERMINAL.includes((await patientGet(`/v1/runs/${runId}`)).status)) await sleep(500);
}

function print(results) {
  const f = (n, d = 1) => (n === null || n === undefined ? "-" : n.toFixed(d));
  console.log(`\nnpm run bench:scale (${new Date().toISOString()}): demo-enrich over an uploaded CSV, simulated provider at 0 ms\n`);
  console.log(
    "| rows | time | rows/s | rows/s per tenth (1st … 10th) | last/first tenth | RPCs/row | workerd memory idle → peak (all of wrangler dev) | isolate heap idle → peak | live heap idle → peak → end | rerun (share, calls) |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|");
  for (const r of results) {
    console.log(
      `| ${r.rows.toLocaleString("en")} | ${f(r.seconds, 0)} s | ${f(r.rowsPerSecond)} | ${r.tenths.map((t) => f(t, 0)).join(" · ")} | ${f(r.lastTenthShare, 2)} | ${f(r.objectRpcsPerRow, 2)} | ${f(r.memory.idleMb, 0)} → ${f(r.memory.peakMb, 0)} MB (${f(r.memory.allIdleMb, 0)} → ${f(r.memory.allPeakMb, 0)}) | ${f(r.heap.idleMb, 0)} → ${f(r.heap.peakMb, 0)} MB | ${f(r.live.idleMb, 0)} → ${f(r.live.peakMb, 0)} → ${f(r.live.endMb, 0)} MB | ${r.rerun ? `${f(r.rerun.share * 100)}%, ${r.rerun.requests}` : "-"} |`,
    );
  }
  if (results.length > 1) {
    const [small, large] = [results[0], results.at(-1)];
    console.log(
      `\nAt ${large.rows.toLocaleString("en")} rows, as a multiple of ${small.rows.toLocaleString("en")} (target ≤ ${TARGETS.memoryGrowth}×): peak live heap ${f(large.live.peakMb / small.live.peakMb, 2)}×, peak isolate heap (garbage included) ${f(large.heap.peakMb / small.heap.peakMb, 2)}×, peak workerd memory ${f(large.memory.peakMb / small.memory.peakMb, 2)}× (all of wrangler dev's processes: ${f(large.memory.allPeakMb / small.memory.allPeakMb, 2)}×).`,
    );
  }
  console.log(
    `Targets: last tenth ≥ ${TARGETS.lastTenthShare * 100}% of the first; rerun ≤ ${TARGETS.rerunShare * 100}% of the first run's time with 0 calls.`,
  );
  for (const r of results)
    if (r.exported)
      console.log(
        `${r.rows.toLocaleString("en")} rows exported as CSV: ${f(r.exported.mb)} MB in ${f(r.exported.seconds)} s (${f(r.exported.rowsPerSecond, 0)} rows/s), isolate heap at most ${f(r.exported.peakHeapMb, 0)} MB meanwhile.`,
      );
  for (const r of results)
    console.log(
      `\n${r.rows} rows, object RPCs per row by kind: ${JSON.stringify(r.objectRpcsByKind, (_, v) => (typeof v === "number" ? Number(v.toFixed(3)) : v))}`,
    );
  console.log(`\n${JSON.stringify(results)}`);
}

/** One size on a server of its own (new state, warmed up): its memory is its own, not what an earlier size left. */
async function onNewServer(count) {
  const stateDir = mkdtempSync(join(tmpdir(), "troupe-bench-scale-"));
  const server = await startServer({ port, stateDir, verbose: values.verbose, inspectorPort });
  let inspector = null;
  try {
    await warmUp();
    inspector = await openInspector();
    return await scaleCase(client(port), server.pid, inspector, count);
  } finally {
    inspector?.close();
    await stopServer(server);
    rmSync(stateDir, { recursive: true, force: true });
  }
}

const results = [];
for (const count of sizes) {
  results.push(await onNewServer(count));
  if (values.verbose) console.error(JSON.stringify(results.at(-1)));
}
print(results);
