// npm run bench's printout: the table (one column per provider latency, then
// the target and whether it is met, and by how much where it is not), the
// object RPCs per row by kind, and the first case's run as the bench always
// showed it (rows/s, ledger events per 1,000 rows, live latency).

export const TARGETS = { share: 0.9, vsWorkflows: 5, rpcsPerRow: 0.05, rerunShare: 0.05, rerunRequests: 0 };

const latencyLabel = (ms) => (ms >= 1000 ? `${ms / 1000} s` : `${ms} ms`);
const pct = (x) => `${(x * 100).toFixed(0)}%`;
const fixed = (x, digits) => (x === null || x === undefined || !Number.isFinite(x) ? "n/a" : x.toFixed(digits));

function percentile(values, p) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

/** A cell of requests/s with its share of the bound. */
function throughput(m, bound) {
  if (!m) return "n/a";
  const stopped = m.capped || m.status === "stopped" || (m.rowsDone !== undefined && m.rowsDone !== null && m.rowsDone < m.rows) ? "*" : "";
  const failed = m.error ? " !" : "";
  return `${m.requestsPerSecond.toFixed(1)} (${pct(m.requestsPerSecond / bound)})${stopped}${failed}`;
}

/** Which runs settled no row before they were stopped (no per-row figure). */
function notSettled(troupe) {
  const missing = troupe.filter((x) => x.settledRows === 0).map((x) => latencyLabel(x.latencyMs));
  return missing.length ? ` (n/a at ${missing.join(", ")}: no row settled before the run was stopped)` : "";
}

/** Which runs were not rerun (a run stopped at its cap is not complete). */
function notRerun(troupe) {
  const missing = troupe.filter((x) => !x.rerun).map((x) => latencyLabel(x.latencyMs));
  return missing.length ? ` (not measured at ${missing.join(", ")}: stopped before it completed)` : "";
}

/** "meets", or "MISSES" with each latency that misses and by how much. */
function verdict(misses, measured = true) {
  if (!measured) return "n/a";
  return misses.length === 0 ? "meets" : `MISSES: ${misses.join("; ")}`;
}

/**
 * The whole printout. `troupe` and `baselines`: one entry per latency, in the
 * same order (either may be missing: its rows then say n/a).
 */
export function report({ rate, concurrency, requestsPerRow, troupe, baselines }) {
  const latencies = [...new Set([...troupe.map((t) => t.latencyMs), ...baselines.map((b) => b.latencyMs)])];
  const boundAt = (ms) => Math.min(rate, concurrency / (ms / 1000));
  const t = (ms) => troupe.find((x) => x.latencyMs === ms);
  const b = (ms) => baselines.find((x) => x.latencyMs === ms);
  const rpcsPerRow = (x) => (x && x.settledRows > 0 ? x.objectRpcs / x.settledRows : null);

  const shareMisses = latencies.flatMap((ms) => {
    const x = t(ms);
    if (!x) return [];
    const share = x.requestsPerSecond / boundAt(ms);
    return share < TARGETS.share ? [`${latencyLabel(ms)} ${pct(share)}, ${((TARGETS.share - share) * 100).toFixed(0)} points short`] : [];
  });
  const ratio = (ms) => (t(ms) && b(ms)?.workflows ? t(ms).requestsPerSecond / b(ms).workflows.requestsPerSecond : null);
  const ratioMisses = latencies.flatMap((ms) => {
    const r = ratio(ms);
    return r !== null && r < TARGETS.vsWorkflows
      ? [`${latencyLabel(ms)} ${r.toFixed(1)}×, ${(TARGETS.vsWorkflows / r).toFixed(1)}× short`]
      : [];
  });
  const rpcMisses = latencies.flatMap((ms) => {
    const r = rpcsPerRow(t(ms));
    return r !== null && r > TARGETS.rpcsPerRow
      ? [`${latencyLabel(ms)} ${r.toFixed(3)}, ${(r / TARGETS.rpcsPerRow).toFixed(1)}× the target`]
      : [];
  });
  const rerunMisses = latencies.flatMap((ms) => {
    const x = t(ms);
    if (!x?.rerun) return [];
    const parts = [];
    if (x.rerun.share > TARGETS.rerunShare)
      parts.push(`${pct(x.rerun.share)} of the first run's time, ${(x.rerun.share / TARGETS.rerunShare).toFixed(1)}× the target`);
    if (x.rerun.requests > TARGETS.rerunRequests) parts.push(`${x.rerun.requests} provider requests`);
    return parts.length ? [`${latencyLabel(ms)} ${parts.join(", ")}`] : [];
  });

  const rows = [
    [
      "Troupe (demo-enrich): provider requests/s (share of bound)",
      (ms) => throughput(t(ms), boundAt(ms)),
      `>= ${pct(TARGETS.share)}`,
      verdict(shareMisses, troupe.length > 0),
    ],
    [
      `  rows/s (share of the bound's rows at ${requestsPerRow} requests each); requests per row`,
      (ms) => {
        const x = t(ms);
        if (!x) return "n/a";
        const share = (x.rowsPerSecond * requestsPerRow) / boundAt(ms);
        return `${x.rowsPerSecond.toFixed(1)} (${pct(share)}); ${fixed(x.providerRequestsPerRow, 2)}`;
      },
      "",
      "",
    ],
    ["  rows settled / of, in", (ms) => (t(ms) ? `${t(ms).settledRows}/${t(ms).rows} in ${t(ms).seconds.toFixed(1)} s` : "n/a"), "", ""],
    [
      "  objects calling the provider; peak in flight per object, in all",
      (ms) => (t(ms) ? `${t(ms).callers}; ${t(ms).peakInFlightPerCaller}, ${t(ms).peakInFlight}` : "n/a"),
      "",
      "",
    ],
    ["Pool in one invocation, emulated limits", (ms) => throughput(b(ms)?.pool, boundAt(ms)), "", ""],
    ["Pool in one invocation, no limits (reference)", (ms) => throughput(b(ms)?.poolNoLimits, boundAt(ms)), "", ""],
    ["Workflows, one step.do per row, emulated limits", (ms) => throughput(b(ms)?.workflows, boundAt(ms)), "", ""],
    [
      "Troupe ÷ Workflows (requests/s)",
      (ms) => (ratio(ms) === null ? "n/a" : `${ratio(ms).toFixed(1)}×`),
      `>= ${TARGETS.vsWorkflows}×`,
      verdict(
        ratioMisses,
        latencies.some((ms) => ratio(ms) !== null),
      ),
    ],
    [
      "Object RPCs per row (bookkeeping)",
      (ms) => fixed(rpcsPerRow(t(ms)), 3),
      `<= ${TARGETS.rpcsPerRow}`,
      verdict(
        rpcMisses,
        troupe.some((x) => x.settledRows > 0),
      ) + notSettled(troupe),
    ],
    [
      "Rerun: time (share of first run), provider requests",
      (ms) =>
        t(ms)?.rerun ? `${t(ms).rerun.seconds.toFixed(2)} s (${(t(ms).rerun.share * 100).toFixed(1)}%), ${t(ms).rerun.requests}` : "n/a",
      `<= ${pct(TARGETS.rerunShare)}, 0`,
      verdict(
        rerunMisses,
        troupe.some((x) => x.rerun),
      ) + notRerun(troupe),
    ],
    ["Duplicates billed (Troupe)", (ms) => (t(ms) ? String(t(ms).duplicates) : "n/a"), "0", ""],
  ];
  const header = ["", ...latencies.map(latencyLabel), "target", "verdict"];
  const body = rows.map(([label, cell, target, v]) => [label, ...latencies.map(cell), target, v]);
  const lines = [
    `Provider: ${rate} requests/s, ${concurrency} at once; bound min(R, concurrency / L) = ${latencies.map((ms) => `${boundAt(ms)}/s at ${latencyLabel(ms)}`).join(", ")}.`,
    "Local wrangler dev, PLATFORM_LIMITS=emulate (6 requests in flight per invocation or object). Requests/s: requests the provider admitted (not 429) over each run's wall time.",
    `Rows/s: rows settled over the same time; at ${requestsPerRow} requests per row (full batches) they would use the whole bound, so their share counts only useful requests (half-empty batches count in requests/s, not there).`,
    "* stopped at its time cap (Troupe: cancelled); ! the invocation failed (see the JSON line)",
    "",
    grid(header, body),
    "",
    "Object RPCs per row by kind:",
    grid(["", ...latencies.map(latencyLabel)], kindRows(latencies, t)),
  ];
  const first = troupe[0];
  if (first?.live) lines.push("", liveSummary(first));
  return lines.join("\n");
}

function kindRows(latencies, t) {
  const totals = new Map();
  for (const ms of latencies)
    for (const [kind, n] of Object.entries(t(ms)?.objectRpcsByKind ?? {})) totals.set(kind, (totals.get(kind) ?? 0) + n);
  return [...totals.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([kind]) => [
      `  ${kind}`,
      ...latencies.map((ms) => (t(ms)?.settledRows ? fixed((t(ms).objectRpcsByKind[kind] ?? 0) / t(ms).settledRows, 4) : "n/a")),
    ]);
}

/** The first case's run, as the bench always reported it. */
function liveSummary(x) {
  if (x.settledRows === 0) return `demo-enrich at ${latencyLabel(x.latencyMs)}: no row settled before the run was stopped`;
  const perK = ((x.live.events / x.settledRows) * 1000).toFixed(1);
  const types = Object.entries(x.live.eventsByType)
    .map(([type, n]) => `${type} ${n}`)
    .join(", ");
  const lat = x.live.chunkLatenciesMs;
  return [
    `demo-enrich at ${latencyLabel(x.latencyMs)}: ${x.rowsPerSecond.toFixed(0)} rows/s (${x.settledRows} rows in ${x.seconds.toFixed(1)} s), ${fixed(x.providerRequestsPerRow, 3)} provider requests/row`,
    `  ledger: ${x.live.events} events, ${perK} per 1,000 rows (${types})`,
    `  live: chunks.completed reached a watching client in p50 ${percentile(lat, 50)} ms, p95 ${percentile(lat, 95)} ms, max ${percentile(lat, 100)} ms (${lat.length} events)`,
  ].join("\n");
}

function grid(header, rows) {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i] ?? "").length)));
  const line = (cells) => `  ${cells.map((c, i) => String(c ?? "").padEnd(widths[i])).join("  ")}`.trimEnd();
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}
