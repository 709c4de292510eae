/**
 * What a pacing gate remembers of a provider's recent traffic: when requests
 * started and when 429s were reported, for a few seconds (enough to measure
 * the limit a 429 reveals), and the counters its snapshot shows.
 */

/** How much history is kept. */
export const HISTORY_MS = 3000;

/** Recent starts and 429s of one (org, provider); see the module comment. */
export class StartHistory {
  /** Start times, ascending. */
  #starts: number[] = [];
  #limited: { at: number; count: number }[] = [];
  #slotsGranted = 0;
  #maxSlotsPerSecond = 0;
  /** The counts are of starts after this one (a restart of them). */
  #countedAfter = Number.NEGATIVE_INFINITY;

  /** Slots granted so far (unpaced starts are not slots). */
  get slotsGranted(): number {
    return this.#slotsGranted;
  }

  /** The most granted slots whose starts fell within any one second. */
  get maxSlotsPerSecond(): number {
    return this.#maxSlotsPerSecond;
  }

  /** The latest start, if any. */
  get last(): number | undefined {
    return this.#starts.at(-1);
  }

  /**
   * Records `count` starts at `at`: granted slots, or requests started
   * unpaced (stamped when reported, so possibly behind slots leased ahead:
   * they are inserted in order).
   */
  record(at: number, { count = 1, granted = true }: { count?: number; granted?: boolean } = {}): void {
    const last = this.#starts.at(-1);
    if (last === undefined || last <= at) for (let i = 0; i < count; i++) this.#starts.push(at);
    else this.#starts.splice(firstAfter(this.#starts, at), 0, ...Array<number>(count).fill(at));
    if (!granted) return;
    this.#slotsGranted += count;
    this.#maxSlotsPerSecond = Math.max(this.#maxSlotsPerSecond, this.started(Math.max(at - 1000, this.#countedAfter), at));
  }

  /** Records `count` 429s reported at `at`. */
  recordLimited(at: number, count: number): void {
    this.#limited.push({ at, count });
  }

  /** Requests started in (from, to]. */
  started(from: number, to: number): number {
    return firstAfter(this.#starts, to) - firstAfter(this.#starts, from);
  }

  /** 429s reported in (from, to]. */
  limited(from: number, to: number): number {
    let count = 0;
    for (const entry of this.#limited) if (entry.at > from && entry.at <= to) count += entry.count;
    return count;
  }

  /** Starts counting slots and 429s afresh (a reset of what was learned); the starts stay, as they still take their second. */
  restartCounts(): void {
    this.#countedAfter = this.last ?? Number.NEGATIVE_INFINITY;
    this.#slotsGranted = 0;
    this.#maxSlotsPerSecond = 0;
    this.#limited = [];
  }

  /** Forgets what is older than {@link HISTORY_MS}. */
  trim(now: number): void {
    const horizon = now - HISTORY_MS;
    if (this.#starts.length > 0 && this.#starts[0]! <= horizon) this.#starts = this.#starts.filter((t) => t > horizon);
    if (this.#limited.length > 0 && this.#limited[0]!.at <= horizon) this.#limited = this.#limited.filter((e) => e.at > horizon);
  }
}

/** The index of the first of the ascending `times` later than `t`. */
function firstAfter(times: readonly number[], t: number): number {
  let lo = 0;
  let hi = times.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (times[mid]! > t) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
