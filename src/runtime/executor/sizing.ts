/**
 * How many executors a run's map keeps busy. A provider that allows R
 * requests/s and answers in L seconds needs R × L requests in flight, and an
 * object holds six: R × L / 6 executors, summed over the providers the run
 * calls, between the policy's floor and ceiling. R is the provider's declared
 * or learned rate from its pacing gate (without one, its gate's concurrency
 * bounds the requests in flight instead); L is the latency the executors
 * observe; two and a half times that ({@link HEADROOM}), never past the provider's
 * concurrency. Until the first reports arrive the map starts at the floor;
 * before the first answer, the age of the oldest request still waiting is
 * the latency it sizes by (the latency is at least that). A map grows only
 * while some provider it calls has slots free at its gate: when every one's
 * rate already holds its requests back, a longer latency does not add
 * executors (they would wait for the same slots). The
 * org's directory leases executors to its runs' maps under `maxExecutorsPerOrg`,
 * shared by what each wants (each keeps at least one), renewed with every refresh. A map whose attempts
 * end having computed nothing (a rerun: every row reused) and that has called
 * no provider is bound by its bookkeeping (reading its rows, claiming them),
 * not by a provider: it runs at the ceiling.
 */
import { MAX_OUTBOUND_IN_FLIGHT } from "../../core/platform-limits";
import { sleep } from "../../core/time";
import { LEASE_REFILL_MS } from "../pacing/gate";

export interface ProviderPace {
  /** Requests per second the provider allows (declared, announced or learned); null when none is known. */
  requestsPerSecond: number | null;
  /** Requests in flight its gate allows at once; null when unbounded. */
  concurrency: number | null;
  /** How far past now its gate's next free slot is (GateSnapshot.bookedForMs); absent: not known. */
  bookedForMs?: number;
}

export interface SizingOptions {
  min: number;
  max: number;
  /** The pace of a provider (its gate's state); asked at most once per refresh. */
  pace(provider: string): Promise<ProviderPace>;
  /** Leases up to `wanted` executors under the org's bound, for a while: answers how many (at least one). */
  lease(wanted: number): Promise<number>;
  /** A refresh changed {@link ExecutorSizer.target}: the map widens (or narrows) now, not at its next report. */
  onResized?(): void;
  /** How long {@link ExecutorSizer.stop} waits for a refresh under way, and for the lease's return (5 s). */
  stopWaitMs?: number;
  /**
   * The most executors the map can use now: its chunks left and its attempts running. A map near its end, or
   * sweeping a rerun, wants no more (what it asks for is its claim on the org's fair shares). Absent: no bound.
   */
  demand?(): number;
  now(): number;
}

/**
 * Executors past R × L / 6: an executor's six connections are not busy all
 * the time (a connection waits for the gate's next slot after each answer),
 * and a map's last chunks run on fewer executors than the pace needs. The
 * gate shares the pace among the executors, so with more of them each chunk
 * is further from its end when the queue runs dry, and the last ones (six
 * connections each) leave less to finish. Exactly R × L / 6 kept a local
 * 500 ms run at 65% of R, half as many again 74% (later 81 to 85%), two and
 * a half times 87 to 88% (`BENCH_LATENCIES=500` runs one after another: 87.3
 * to 88.1% in three, 81 and 85% at 1.5 ×, 86% at 2 × and at 3 ×). The gate
 * still keeps every request to the rate, so the extra executors only fill
 * the gaps; each reports its progress and claims its receipts, about 0.1
 * object RPCs per row more at 500 ms.
 */
const HEADROOM = 2.5;

/**
 * A gate whose next free slot is this far off or further is saturated: its
 * callers hold more connections than its rate lets them use, so they lease
 * slots ahead and wait for them (a caller asks again once this much of the
 * schedule has freed). A map whose providers' gates are all saturated is not
 * widened, whatever latency it observes: its new executors would wait for the
 * same slots.
 */
const SATURATED_MS = LEASE_REFILL_MS;

/** How often the providers' pace is asked again. */
const REFRESH_MS = 5_000;

/** See {@link SizingOptions.stopWaitMs}. */
const STOP_WAIT_MS = 5_000;

const noop = () => {};

export class ExecutorSizer {
  #deps: SizingOptions;
  #providers = new Map<string, ProviderPace | null>();
  #latencyMs: number | null = null;
  /** Until a latency is known: the longest a request was seen waiting for its answer. */
  #waitedMs = 0;
  /** What the last lease asked the org for. */
  #asked = 0;
  #refreshedAt = -Infinity;
  #refreshing: Promise<void> | null = null;
  /** What the org's bound leaves this map (null until the first lease). */
  #leased: number | null = null;
  /** An attempt ended having computed no row. */
  #reusedOnly = false;
  /** The map's chunks are done: nothing is leased any more. */
  #stopped = false;

  constructor(options: SizingOptions) {
    this.#deps = options;
  }

  /**
   * A report's observations: providers billed through or called, the latency of its requests, and how long its
   * oldest request still unanswered has waited (ChunkAssignment.sizing).
   */
  observe(providers: Iterable<string>, latency: { calls: number; totalMs: number } | null, waitedMs = 0): void {
    for (const provider of providers) {
      if (this.#providers.has(provider)) continue;
      this.#providers.set(provider, null);
      // A provider not seen before: ask its pace (and the lease it needs) at once.
      this.#refreshedAt = Number.NEGATIVE_INFINITY;
    }
    if (latency && latency.calls > 0) {
      const mean = latency.totalMs / latency.calls;
      // The first latency sizes the map at once: until now it ran at the floor (a refresh had no latency to size by).
      if (this.#latencyMs === null) this.#refreshedAt = Number.NEGATIVE_INFINITY;
      // A moving average: a few slow answers do not double the executors at once.
      this.#latencyMs = this.#latencyMs === null ? mean : this.#latencyMs * 0.7 + mean * 0.3;
    } else if (this.#latencyMs === null && waitedMs > this.#waitedMs) {
      this.#waitedMs = waitedMs;
      // Slower than the map was sized for so far: lease more at once.
      if (this.#wanted() > this.#asked) this.#refreshedAt = Number.NEGATIVE_INFINITY;
    }
  }

  /** No latency is known yet: the map's attempts report their first answers early, and their waits until then. */
  get sizing(): boolean {
    return this.#latencyMs === null;
  }

  /** An attempt ended having computed none of its rows (all reused): the map may need no provider at all. */
  observeReusedOnly(): void {
    if (this.#reusedOnly) return;
    this.#reusedOnly = true;
    // Until a provider is seen, this is bookkeeping: lease the ceiling at once.
    if (this.#providers.size === 0) this.#refreshedAt = Number.NEGATIVE_INFINITY;
  }

  /** Takes the map's first lease under the org's bound, before its first chunk goes out. */
  async start(): Promise<void> {
    await this.#lease(this.#deps.min);
    this.#refreshedAt = this.#deps.now();
  }

  /** The map's chunks are done here: its lease goes back to the org (else it lapses by itself). */
  async stop(): Promise<void> {
    // A refresh under way, or one a last report asks for while this waits, must not lease again after the lease goes
    // back: the org's bound would stay taken by a map that is done until the lease lapsed.
    this.#stopped = true;
    // Neither may hold the map's end up: a gate or a directory that never answers would keep the run from going on
    // (an unreturned lease lapses by itself).
    const waiting = new AbortController();
    const bounded = (work: Promise<unknown>) =>
      Promise.race([work.then(noop, noop), sleep(this.#deps.stopWaitMs ?? STOP_WAIT_MS, waiting.signal).catch(noop)]);
    try {
      await bounded(this.#refreshing ?? Promise.resolve());
      await bounded(this.#deps.lease(0));
    } finally {
      waiting.abort();
    }
  }

  /** The executors the map should have now: what its providers need, within the policy and the org's lease. */
  target(): number {
    this.#refresh();
    return this.#sized();
  }

  /** What the providers need, within the policy and the org's lease, as last refreshed. */
  #sized(): number {
    return Math.min(this.#wanted(), this.#leased ?? Number.POSITIVE_INFINITY);
  }

  #wanted(): number {
    const demand = this.#deps.demand?.() ?? Number.POSITIVE_INFINITY;
    return Math.max(1, Math.min(this.#needed(), demand));
  }

  /** What the map's providers need, within the policy. */
  #needed(): number {
    const { min, max } = this.#deps;
    if (this.#providers.size === 0 && this.#reusedOnly) return max;
    const latencyMs = this.#latencyMs ?? this.#waitedMs;
    if (latencyMs === 0) return min;
    const latencyS = latencyMs / 1000;
    let inFlight = 0;
    for (const pace of this.#providers.values()) {
      if (!pace) continue;
      const concurrency = pace.concurrency ?? Number.POSITIVE_INFINITY;
      // Never past the provider's concurrency: executors beyond it would only take units from each other.
      inFlight += pace.requestsPerSecond === null ? concurrency : Math.min(concurrency, pace.requestsPerSecond * latencyS * HEADROOM);
    }
    if (inFlight === 0) return min;
    return Math.max(min, Math.min(max, Math.ceil(inFlight / MAX_OUTBOUND_IN_FLIGHT)));
  }

  /**
   * Asks the gates of the providers seen again, then renews the org's lease
   * for what they need, in the background, once per {@link REFRESH_MS}.
   */
  #refresh(): void {
    const now = this.#deps.now();
    if (this.#stopped || this.#refreshing || now - this.#refreshedAt < REFRESH_MS) return;
    this.#refreshedAt = now;
    const before = this.#sized();
    this.#refreshing = Promise.all(
      [...this.#providers.keys()].map(async (provider) => {
        const pace = await this.#deps.pace(provider).catch(() => null);
        if (pace) this.#providers.set(provider, pace);
      }),
    )
      // Widened only for a provider with free slots: while each gate's rate holds the map's requests back, more
      // executors would wait for the same slots. A latency observed longer under that load (locally, one thread
      // running every object) asked for more executors, whose start took the thread from the rest.
      .then(() => this.#lease(this.#saturated() ? Math.min(this.#wanted(), before) : this.#wanted()))
      .finally(() => {
        this.#refreshing = null;
        if (this.#sized() !== before) this.#deps.onResized?.();
      });
  }

  /** Every provider the map calls has a known pace, and each one's gate has no slot free for a while (SATURATED_MS). */
  #saturated(): boolean {
    const paces = [...this.#providers.values()];
    return paces.length > 0 && paces.every((pace) => pace !== null && (pace.bookedForMs ?? 0) >= SATURATED_MS);
  }

  /**
   * A lease the directory could not give keeps the last one (or none: the policy alone bounds the map). One
   * answered after {@link stop} (which gave up waiting for it) may have reached the directory after the lease
   * went back: it goes back again.
   */
  async #lease(wanted: number): Promise<void> {
    if (this.#stopped) return;
    this.#asked = wanted;
    const leased = await this.#deps.lease(wanted).catch(() => null);
    if (leased !== null) this.#leased = leased;
    if (this.#stopped && wanted > 0) await this.#deps.lease(0).catch(noop);
  }
}
