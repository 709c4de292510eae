/**
 * The parts of a run's page, each drawn from the run's state: progress per
 * map, the throughput chart, spend, and the lines of the event log.
 */
import { formatCount, formatDuration, formatNumber, formatTime, h, svg } from "./dom";
import type { LedgerEvent } from "../client";
import type { LiveMapProgress, RunInfo } from "./run-state";
import { chartGeometry, type ThroughputSample } from "./throughput";

/**
 * A bar per map: completed and failed rows of its total, and while the run is
 * live the rows being computed, the rate and the ETA (an ended run has none).
 */
export function progressSection(maps: Record<string, LiveMapProgress>, options: { ended: boolean }): HTMLElement {
  const names = Object.keys(maps);
  return h(
    "div",
    { class: "card", "data-testid": "progress" },
    h("h2", {}, "Progress"),
    names.length === 0
      ? h("p", { class: "muted" }, "No map has started yet.")
      : names.map((name) => mapBar(name, maps[name]!, options.ended)),
  );
}

function mapBar(name: string, m: LiveMapProgress, ended: boolean): HTMLElement {
  const total = m.total ?? 0;
  const completed = m.completed ?? 0;
  const failed = m.failed ?? 0;
  const inFlight = ended ? 0 : (m.inFlight ?? m.active ?? 0);
  const pct = (n: number) => (total > 0 ? `${Math.min(100, (n / total) * 100).toFixed(2)}%` : "0%");
  const done = completed + failed;
  return h(
    "div",
    { class: "map", "data-map": name },
    h(
      "div",
      { class: "map-head" },
      h("span", { class: "map-name" }, name),
      h("span", { class: "mono" }, `${formatCount(done)} / ${formatCount(total)}`),
    ),
    h(
      "div",
      {
        class: "bar",
        role: "progressbar",
        "aria-label": `${name} rows done`,
        "aria-valuemin": 0,
        "aria-valuemax": total,
        "aria-valuenow": done,
      },
      h("div", { class: "done", style: `width: ${pct(completed)}` }),
      h("div", { class: "failed", style: `width: ${pct(failed)}` }),
      h("div", { class: "active", style: `width: ${pct(Math.min(inFlight, Math.max(0, total - done)))}` }),
    ),
    h(
      "div",
      { class: "map-stats" },
      `${formatCount(completed)} completed · ${formatCount(failed)} failed`,
      ended ? "" : ` · ${formatCount(inFlight)} in flight`,
      m.rowsPerSecond != null && !ended ? ` · ${formatNumber(m.rowsPerSecond)} rows/s` : "",
      m.etaSeconds != null && !ended && done < total ? ` · ETA ${formatDuration(m.etaSeconds)}` : "",
      m.blocked ? ` · ${formatCount(m.blocked)} blocked` : "",
    ),
  );
}

const CHART = { width: 560, height: 120, left: 44, top: 8, bottom: 22 };

/** Rows per second over time, all maps together. */
export function throughputSection(samples: readonly ThroughputSample[]): HTMLElement {
  const plot = { width: CHART.width - CHART.left - 8, height: CHART.height };
  const g = chartGeometry(samples, plot);
  const body =
    samples.length < 2
      ? h("p", { class: "muted" }, "Throughput appears once the run reports progress.")
      : svg(
          "svg",
          {
            viewBox: `0 0 ${CHART.width} ${CHART.top + CHART.height + CHART.bottom}`,
            role: "img",
            "aria-label": `throughput, up to ${formatNumber(g.yMax)} rows per second`,
            "data-testid": "throughput-chart",
          },
          svg(
            "g",
            { transform: `translate(${CHART.left},${CHART.top})` },
            svg("line", { class: "axis", x1: 0, y1: 0, x2: plot.width, y2: 0 }),
            svg("line", { class: "axis", x1: 0, y1: plot.height / 2, x2: plot.width, y2: plot.height / 2 }),
            svg("line", { class: "axis", x1: 0, y1: plot.height, x2: plot.width, y2: plot.height }),
            svg("path", { class: "area", d: g.area }),
            svg("path", { class: "line", d: g.line }),
            svg("text", { class: "label", x: -6, y: 4, "text-anchor": "end" }, formatNumber(g.yMax)),
            svg("text", { class: "label", x: -6, y: plot.height / 2 + 4, "text-anchor": "end" }, formatNumber(g.yMax / 2)),
            svg("text", { class: "label", x: -6, y: plot.height + 4, "text-anchor": "end" }, "0"),
            svg("text", { class: "label", x: 0, y: plot.height + 16 }, "0 s"),
            svg("text", { class: "label", x: plot.width, y: plot.height + 16, "text-anchor": "end" }, formatDuration(g.spanSeconds)),
          ),
        );
  return h("div", { class: "card chart" }, h("h2", {}, "Throughput (rows/s)"), body);
}

/** Credits billed to the run, by tool and provider; `liveTotal` is the latest `map.progress` total. */
export function spendSection(run: RunInfo, liveTotal: number | null): HTMLElement {
  const spend = run.usage?.spend;
  const total = typeof spend?.total === "number" ? Math.max(spend.total, liveTotal ?? 0) : liveTotal;
  if (total === null || total === undefined) {
    return h(
      "div",
      { class: "card", "data-testid": "spend" },
      h("h2", {}, "Spend"),
      h("p", { class: "muted" }, "This server does not report spend."),
    );
  }
  const entries = (label: string, byKey: Record<string, number> | undefined) =>
    Object.entries(byKey ?? {}).map(([key, credits]) =>
      h("tr", {}, h("td", {}, label), h("td", { class: "mono" }, key), h("td", { class: "num" }, formatNumber(credits))),
    );
  const rows = [...entries("tool", spend?.byTool), ...entries("provider", spend?.byProvider)];
  return h(
    "div",
    { class: "card", "data-testid": "spend" },
    h("h2", {}, "Spend"),
    h(
      "div",
      { class: "row" },
      h("span", { class: "spend-total", "data-testid": "spend-total" }, `${formatNumber(total)} credits`),
      run.maxSpend != null ? h("span", { class: "muted" }, `of at most ${formatNumber(run.maxSpend)}`) : null,
    ),
    rows.length ? h("table", { style: "margin-top: 8px" }, h("tbody", {}, rows)) : null,
  );
}

/** One line of the event log. */
export function eventItem(event: LedgerEvent): HTMLElement {
  const kind = event.type.startsWith("run.") ? (event.type === "run.completed" ? "run" : event.type === "run.started" ? "run" : "bad") : "";
  return h(
    "li",
    { "data-seq": event.seq, "data-type": event.type },
    h("span", { class: "seq" }, `#${event.seq}`),
    h("span", { class: "at" }, formatTime(event.at)),
    h("span", { class: `type ${kind}` }, event.type),
    h("span", { class: "detail", title: eventDetail(event) }, eventDetail(event)),
  );
}

/** A one-line summary of an event's fields. */
export function eventDetail(event: LedgerEvent): string {
  const e = event as Record<string, any>;
  switch (event.type) {
    case "log.appended":
      return String(e.line ?? "");
    case "map.progress":
      return (
        `${e.map}: ${formatCount((e.completed ?? 0) + (e.failed ?? 0))}/${formatCount(e.total)} done, ${formatCount(e.failed)} failed` +
        (e.rowsPerSecond != null ? `, ${formatNumber(e.rowsPerSecond)} rows/s` : "") +
        (typeof e.spend === "number" ? `, ${formatNumber(e.spend)} credits` : "")
      );
    case "chunks.completed": {
      const chunks = event.chunks ?? [];
      const sum = (field: "completed" | "failed" | "reused") => chunks.reduce((n, c) => n + (c[field] ?? 0), 0);
      const which = chunks.length === 1 ? `chunk ${chunks[0]!.chunk}` : `${formatCount(chunks.length)} chunks`;
      return `${e.map} ${which}: ${formatCount(sum("completed"))} completed, ${formatCount(sum("failed"))} failed, ${formatCount(sum("reused"))} reused`;
    }
    case "run.failed":
      return `${e.error?.code ?? "failed"}: ${e.error?.message ?? ""}`;
    case "run.completed":
      return `result ${JSON.stringify(e.result ?? null)}`;
    case "wait.started":
      return e.kind === "event" ? `waiting for signal ${JSON.stringify(e.eventKey)}` : `sleeping until ${formatTime(e.dueAt)}`;
    default: {
      const { seq: _seq, type: _type, at: _at, ...fields } = e;
      const text = JSON.stringify(fields);
      return text === "{}" ? "" : text;
    }
  }
}
