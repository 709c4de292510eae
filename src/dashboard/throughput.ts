/**
 * Throughput over time, from a run's `map.progress` events: one sample per
 * event, the rows per second of all the run's maps together. Pure (no DOM),
 * so the chart's arithmetic is tested on its own.
 */

/** The fields of a `map.progress` event this module reads. */
export interface ProgressEvent {
  at: string;
  map: string;
  completed?: number;
  failed?: number;
  /** The map's rows: one with all of them done adds nothing to the run's rate from then on. */
  total?: number;
  rowsPerSecond?: number | null;
}

/** Rows per second of the whole run at one moment. */
export interface ThroughputSample {
  atMs: number;
  rowsPerSecond: number;
}

/**
 * Accumulates samples. Each map's rate is the event's `rowsPerSecond` when it
 * has one, otherwise the rows it finished since its previous event divided by
 * the time between them; the run's rate is the sum of its maps' latest rates
 * (a map whose rows are all done counts none: its last rate is its past).
 */
export class ThroughputSeries {
  readonly #maps = new Map<string, { atMs: number; done: number; rate: number }>();
  readonly #samples: ThroughputSample[] = [];
  readonly #maxSamples: number;

  /** Keeps the latest `maxSamples` samples (older ones fall off the chart's left). */
  constructor(options: { maxSamples?: number } = {}) {
    this.#maxSamples = options.maxSamples ?? 600;
  }

  /** Adds the sample of one event; events whose time does not parse are ignored. */
  add(event: ProgressEvent): void {
    const atMs = Date.parse(event.at);
    if (!Number.isFinite(atMs)) return;
    const done = (event.completed ?? 0) + (event.failed ?? 0);
    const previous = this.#maps.get(event.map);
    let rate = typeof event.rowsPerSecond === "number" && Number.isFinite(event.rowsPerSecond) ? event.rowsPerSecond : null;
    if (rate === null) rate = previous && atMs > previous.atMs ? ((done - previous.done) * 1000) / (atMs - previous.atMs) : 0;
    const finished = typeof event.total === "number" && event.total > 0 && done >= event.total;
    this.#maps.set(event.map, { atMs, done, rate: finished ? 0 : Math.max(0, rate) });
    let total = 0;
    for (const m of this.#maps.values()) total += m.rate;
    this.#samples.push({ atMs, rowsPerSecond: total });
    if (this.#samples.length > this.#maxSamples) this.#samples.splice(0, this.#samples.length - this.#maxSamples);
  }

  /** The samples so far, oldest first. */
  get samples(): readonly ThroughputSample[] {
    return this.#samples;
  }
}

/** Where the chart's line and area go, in SVG user units. */
export interface ChartGeometry {
  /** `d` of the line's path; empty without samples. */
  line: string;
  /** `d` of the filled area under the line; empty without samples. */
  area: string;
  /** The y axis' top value (rows/s), a round number at or above every sample. */
  yMax: number;
  /** Seconds from the first sample to the last. */
  spanSeconds: number;
}

/** A round number (1, 2 or 5 times a power of ten) at or above `n`. */
export function niceCeiling(n: number): number {
  if (!(n > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(n));
  for (const step of [1, 2, 5, 10]) if (step * power >= n) return step * power;
  return 10 * power;
}

/**
 * Lays the samples out in a `width` × `height` box, time left to right, rate
 * bottom to top. A single sample is drawn as a flat line across the box.
 */
export function chartGeometry(samples: readonly ThroughputSample[], box: { width: number; height: number }): ChartGeometry {
  if (samples.length === 0) return { line: "", area: "", yMax: 1, spanSeconds: 0 };
  const first = samples[0]!.atMs;
  const last = samples[samples.length - 1]!.atMs;
  const span = Math.max(last - first, 1);
  const yMax = niceCeiling(Math.max(...samples.map((s) => s.rowsPerSecond)));
  const points = samples.map((s) => {
    const x = samples.length === 1 ? 0 : ((s.atMs - first) / span) * box.width;
    const y = box.height - (s.rowsPerSecond / yMax) * box.height;
    return [round(x), round(y)] as const;
  });
  if (points.length === 1) points.push([box.width, points[0]![1]]);
  const line = points.map(([x, y], i) => `${i === 0 ? "M" : "L"}${x},${y}`).join(" ");
  const area = `${line} L${points[points.length - 1]![0]},${box.height} L${points[0]![0]},${box.height} Z`;
  return { line, area, yMax, spanSeconds: (last - first) / 1000 };
}

function round(n: number): number {
  return Math.round(n * 10) / 10;
}
