import { describe, expect, it } from "vitest";
import { chartGeometry, niceCeiling, ThroughputSeries } from "./throughput";

const at = (ms: number) => new Date(Date.UTC(2026, 0, 1) + ms).toISOString();

describe("the dashboard's throughput series", () => {
  it("sums the latest rate of every map", () => {
    const series = new ThroughputSeries();
    series.add({ at: at(0), map: "a", rowsPerSecond: 10 });
    series.add({ at: at(500), map: "b", rowsPerSecond: 5 });
    series.add({ at: at(1000), map: "a", rowsPerSecond: 20 });
    expect(series.samples.map((s) => s.rowsPerSecond)).toEqual([10, 15, 25]);
  });

  it("derives a map's rate from its finished rows when the event has none", () => {
    const series = new ThroughputSeries();
    series.add({ at: at(0), map: "a", completed: 0, failed: 0 });
    series.add({ at: at(2000), map: "a", completed: 30, failed: 10 });
    expect(series.samples.map((s) => s.rowsPerSecond)).toEqual([0, 20]);
  });

  it("counts nothing of a map whose rows are all done: a later map's rate is the run's", () => {
    const series = new ThroughputSeries();
    series.add({ at: at(0), map: "people", completed: 50, failed: 0, total: 100, rowsPerSecond: 100 });
    series.add({ at: at(500), map: "people", completed: 90, failed: 10, total: 100, rowsPerSecond: 100 });
    series.add({ at: at(10_000), map: "companies", completed: 5, failed: 0, total: 20, rowsPerSecond: 5 });
    expect(series.samples.map((s) => s.rowsPerSecond)).toEqual([100, 0, 5]);
  });

  it("keeps only the latest samples", () => {
    const series = new ThroughputSeries({ maxSamples: 2 });
    for (const [ms, rate] of [
      [0, 4],
      [1000, 6],
      [2000, 8],
    ] as const)
      series.add({ at: at(ms), map: "a", rowsPerSecond: rate });
    expect(series.samples).toEqual([
      { atMs: Date.parse(at(1000)), rowsPerSecond: 6 },
      { atMs: Date.parse(at(2000)), rowsPerSecond: 8 },
    ]);
  });
});

describe("the throughput chart's geometry", () => {
  it("rounds the axis up and spans the box", () => {
    expect([niceCeiling(0), niceCeiling(7), niceCeiling(10), niceCeiling(130)]).toEqual([1, 10, 10, 200]);
    const g = chartGeometry(
      [
        { atMs: 0, rowsPerSecond: 0 },
        { atMs: 1000, rowsPerSecond: 50 },
        { atMs: 2000, rowsPerSecond: 100 },
      ],
      { width: 200, height: 100 },
    );
    expect(g).toEqual({ line: "M0,100 L100,50 L200,0", area: "M0,100 L100,50 L200,0 L200,100 L0,100 Z", yMax: 100, spanSeconds: 2 });
  });

  it("draws one sample as a flat line, and nothing without samples", () => {
    expect(chartGeometry([{ atMs: 5, rowsPerSecond: 4 }], { width: 100, height: 50 }).line).toBe("M0,10 L100,10");
    expect(chartGeometry([], { width: 100, height: 50 }).line).toBe("");
  });
});
