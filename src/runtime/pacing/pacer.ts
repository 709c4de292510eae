/**
 * The caller's side of a pacing gate: one `Pacer` per (invocation, provider).
 * Calls wait here for a slot; the pacer leases slots and concurrency units
 * from the gate in bulk (one gate call for many provider requests) and hands
 * them out, each at its start time, to the lowest rank waiting (a chunk's
 * rows in order, src/core/request-rank.ts). A pacer holds at most as many
 * units as its object may have requests in flight; with every one busy it
 * asks the gate nothing until one of its requests ends, and it asks once for
 * the several that end about together. A request its caller cannot go on
 * without (a recovery lookup, `rateSlot`) takes a slot of the rate alone:
 * before every call waiting, and without a unit. What the provider's answers say
 * about its limit (`PacerSlot.release`) and its 429s (`backpressure`) go to
 * the gate with the next lease, or at once when they cannot wait.
 */
import { MAX_OUTBOUND_IN_FLIGHT } from "../../core/platform-limits";
import { ToolCallError } from "../../play/tool-error";
import { messageOf } from "../../core/errors";
import type { GateSignal, Grant } from "./gate";
import { HOLDER_TTL_MS } from "./units";
import { PACE_UTILIZATION, type PacingPolicy } from "./policy";
import { HeardSignals } from "./heard";
import { type RateLimitSignals, saneWaitMs } from "./signals";
import { type PacerSlot, type Waiter, WaiterQueue } from "./waiters";

export type { PacerSlot } from "./waiters";

/** The gate as a pacer needs it (the PacingGate stub, bound to one provider). */
export interface GateClient {
  acquire(request: {
    caller: string;
    slots: number;
    rateOnly: number;
    inFlight: number;
    units: number;
    signal: GateSignal;
  }): Promise<Grant>;
  report(request: { signal: GateSignal }): Promise<{ pausedForMs: number }>;
  release(request: { caller: string }): Promise<void>;
}

/** The gate to lease from, this caller's id, and the policy assumed until the gate answers. */
export interface PacerOptions {
  gate: GateClient;
  /** Unique per invocation of a run. */
  caller: string;
  /** Assumed until the gate's first answer. */
  policy: PacingPolicy;
  now(): number;
  log(line: string): void;
}

/** Units asked for beyond the requests waiting, so a trickle of calls does not ask the gate each time. */
const UNIT_HEADROOM = 16;
/**
 * Most units a pacer holds: its object never has more requests than this in
 * flight (the platform's limit), so units past it would only be hoarded from
 * the org's other objects, and a slot taken for a request that then waits
 * for one of the object's connections would start late.
 */
const MAX_UNITS = MAX_OUTBOUND_IN_FLIGHT;
/**
 * A pacer the gate gave fewer units than it asked for (others hold them)
 * asks again after this long, doubling while the answer stays the same, up
 * to {@link STARVED_RETRY_MAX_MS}: units come back as their holders finish.
 */
const UNIT_RETRY_MS = 100;
const STARVED_RETRY_MAX_MS = 1000;
/** A pacer whose every unit is busy renews its hold this often (the gate lets units lapse after {@link HOLDER_TTL_MS}). */
const RENEW_MS = HOLDER_TTL_MS / 2;
/**
 * When a request ends and no leased slot is left, the pacer waits before
 * asking the gate, so that the requests ending about together share one
 * call: this share of its requests' recent duration (at most
 * {@link DURATION_COALESCE_MS})...
 */
const COALESCE_SHARE = 0.2;
const DURATION_COALESCE_MS = 100;
/**
 * ...or, when its last slots started well after it asked (the gate's
 * schedule is leased far ahead: many callers share the rate), this share of
 * that lead, at most {@link LEAD_COALESCE_MS}: the wait then delays nothing
 * the schedule would not, since asking earlier only queues further back.
 */
const LEAD_SHARE = 0.5;
const LEAD_COALESCE_MS = 500;
/**
 * A slot handed out more than this after its start (its waiter came late, a
 * timer fired late, the lease's answer was slow) is dropped, not used: the
 * gate's schedule has moved on, and a late start bunches with the slots of
 * other callers that follow it. The gate leaves {@link PACE_UTILIZATION}'s
 * remainder of every second free (40 ms): starts shifted by no more than
 * that cannot put a second over the rate. (Half of it, 20 ms, cost 14 points
 * of throughput at 50 ms latency on a loaded local server, where timers
 * often fire late, for no fewer 429s.)
 */
export const LATE_SLOT_MS = Math.round((1 - PACE_UTILIZATION) * 1000);
/** Idle this long with units held, the pacer gives them back. */
const IDLE_RELEASE_MS = 250;
/** A 429 whose wait ends within this of the pause already reported is only counted, not reported again at once. */
const REPORT_COALESCE_MS = 50;

/** Hands out pacing slots in order; see the module comment. */
export class Pacer {
  #deps: PacerOptions;
  #policy: PacingPolicy;
  /** Leased slot start times (local clock), ascending. */
  #stock: number[] = [];
  /** Concurrency units held; 0 until the gate grants some, null when unlimited. */
  #units: number | null = 0;
  #inFlight = 0;
  /** The gate granted fewer units than the last acquire asked for: only then does a pacer with every unit busy ask again. */
  #starved = false;
  /** Gate answers in a row that left this pacer short of units. */
  #starvedRounds = 0;
  #renewTimer: ReturnType<typeof setTimeout> | null = null;
  /** The gate was asked at least once: it counts this caller until released. */
  #asked = false;
  /** Closed: the invocation is over. */
  #closed = false;
  /** How many times it was closed: an answer to an acquire sent before the last close is not this pacer's now. */
  #closes = 0;
  /** How long its requests hold a slot, smoothed (null until one ends). */
  #durationMs: number | null = null;
  /** How far ahead of its asking the first slot of the last lease with slots started. */
  #leadMs = 0;
  #waiters = new WaiterQueue();
  #leasing = false;
  #retryTimer: ReturnType<typeof setTimeout> | null = null;
  #idleTimer: ReturnType<typeof setTimeout> | null = null;
  /** Slots that start before this were leased before a 429: they are dropped. */
  #pausedUntil = 0;
  /** Until this local time the gate said nothing paces the provider: requests need only a unit. */
  #unpacedUntil = 0;
  /** The next slot handed out is the gate's probe: its answer is reported at once. */
  #probeNext = false;
  #heard = new HeardSignals();
  /** A report is on its way; news meanwhile sets `#tellAgain`. */
  #telling = false;
  #tellAgain = false;

  constructor(options: PacerOptions) {
    this.#deps = options;
    this.#policy = options.policy;
  }

  /** The policy the gate answered with last (the default before its first answer). */
  get policy(): PacingPolicy {
    return this.#policy;
  }

  /** Waits for a slot (its start time and a concurrency unit); a lower `rank` is served first. */
  slot(signal: AbortSignal, rank = Number.POSITIVE_INFINITY): Promise<PacerSlot> {
    return this.#wait(signal, rank, true);
  }

  /**
   * Waits for a slot of the rate alone, for a request its caller must make
   * before it can go on (a recovery lookup): it counts against the
   * provider's rate like any slot, but it takes no concurrency unit and is
   * served before every call waiting, so it never waits behind the calls
   * whose units it would need (its caller's own, holding every unit).
   */
  rateSlot(signal: AbortSignal, rank = Number.POSITIVE_INFINITY): Promise<PacerSlot> {
    return this.#wait(signal, rank, false);
  }

  /** How long its calls take, from their slot's start to their answer, smoothed (null until one ends). */
  get callMs(): number | null {
    return this.#durationMs;
  }

  #wait(signal: AbortSignal, rank: number, unit: boolean): Promise<PacerSlot> {
    signal.throwIfAborted();
    // Used again after close (a call late in its invocation): it asks the gate afresh.
    this.#closed = false;
    return new Promise<PacerSlot>((resolve, reject) => {
      const waiter: Waiter = {
        rank,
        unit,
        resolve,
        reject,
        signal,
        onAbort: () => {
          this.#waiters.remove(waiter);
          reject(signal.reason);
        },
      };
      signal.addEventListener("abort", waiter.onAbort, { once: true });
      this.#waiters.add(waiter, false);
      this.#pump();
    });
  }

  /**
   * The provider answered 429 (or what its tool classifies as one), asking
   * for `retryAfterMs` (null: it did not say): drop the slots leased before
   * the wait ends and tell the gate, which pauses and slows every caller of
   * the provider. A 429 whose wait the gate has already been told of is only
   * counted, and told with the next call.
   */
  async backpressure(asked: number | null): Promise<void> {
    const retryAfterMs = saneWaitMs(asked);
    const now = this.#deps.now();
    // A 429 naming no wait is paused for as long as the gate decides (its answer to the report).
    const news = retryAfterMs === null ? this.#pausedUntil <= now : now + retryAfterMs > this.#pausedUntil + REPORT_COALESCE_MS;
    if (retryAfterMs !== null) this.#pause(now + retryAfterMs);
    this.#heard.limited(retryAfterMs === null ? null : now + retryAfterMs);
    if (news) await this.#tell();
  }

  /** Gives the concurrency units back (end of the invocation). */
  async close(): Promise<void> {
    if (this.#idleTimer) clearTimeout(this.#idleTimer);
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    if (this.#renewTimer) clearTimeout(this.#renewTimer);
    // Cleared, not only stopped: a pacer used again after close leases only without a timer pending.
    this.#idleTimer = null;
    this.#retryTimer = null;
    this.#renewTimer = null;
    this.#closed = true;
    this.#closes++;
    // Asked once, the gate counts this caller (given no units: among the starved) until told it is gone.
    if (!this.#asked) return;
    // An acquire still on its way releases again when it is answered (the gate may take it after this release).
    this.#asked = this.#leasing;
    this.#units = 0;
    await this.#deps.gate.release({ caller: this.#deps.caller });
  }

  /** Hands out what slots and units allow; `released` says a request just ended (others may end about now too). */
  #pump(released = false): void {
    if (this.#idleTimer) {
      clearTimeout(this.#idleTimer);
      this.#idleTimer = null;
    }
    while (this.#waiters.length > 0) {
      const now = this.#deps.now();
      // A pause the provider asked for (a 429) holds unpaced starts too (a grant the gate made before it heard of the
      // 429, or when it could not be told, would start them at once): its end is the next time to ask.
      const paused = now < this.#pausedUntil;
      const unpaced = now < this.#unpacedUntil && !paused;
      // The first waiter is served first: one of the rate alone, whenever there is any, needs no unit.
      if (this.#waiters.first!.unit && this.#inFlight >= this.#usable()) {
        // Every unit is busy: a new slot is of no use before one of our requests ends (which pumps again),
        // unless the gate may grant more units than it did.
        if (this.#starved || (this.#units !== null && this.#units < this.#unitsWanted())) this.#lease();
        else this.#armRenew();
        return;
      }
      this.#dropLate();
      if (this.#stock.length === 0 && !unpaced) {
        this.#lease(paused ? this.#pausedUntil - now : released && this.#inFlight > 0 ? this.#coalesceMs() : 0);
        // Waiting out the pause, it still holds the units of its requests in flight (else they lapse to other callers).
        if (paused && this.#inFlight > 0) this.#armRenew();
        return;
      }
      const leased = this.#stock.shift();
      const at = leased ?? this.#deps.now();
      const probe = leased !== undefined && this.#probeNext;
      if (probe) this.#probeNext = false;
      if (leased === undefined) this.#heard.unpacedStart(this.#deps.now());
      const waiter = this.#waiters.shift()!;
      if (waiter.unit) this.#inFlight++;
      const delay = at - this.#deps.now();
      if (delay <= 0) this.#grant(waiter, at, probe);
      else setTimeout(() => this.#grant(waiter, at, probe), delay);
    }
    if (this.#inFlight > 0) this.#armRenew();
  }

  /** Drops the leased slots whose start is too long past to use (see {@link LATE_SLOT_MS}). */
  #dropLate(): void {
    const late = this.#deps.now() - LATE_SLOT_MS;
    let stale = 0;
    while (stale < this.#stock.length && this.#stock[stale]! < late) stale++;
    if (stale > 0) this.#stock.splice(0, stale);
  }

  /** Hands a slot over at its start time, unless a 429 arrived meanwhile or its timer fired too late (then the waiter queues again). */
  #grant(waiter: Waiter, at: number, probe: boolean): void {
    if (waiter.signal.aborted || at < this.#pausedUntil || this.#deps.now() - at > LATE_SLOT_MS) {
      if (waiter.unit) this.#inFlight--;
      if (!waiter.signal.aborted) this.#waiters.add(waiter, true);
      // The probe was never sent: say so, or every caller waits for its answer until the gate gives up on it.
      if (probe) this.#answered(null, at, true);
      this.#pump();
      return;
    }
    waiter.signal.removeEventListener("abort", waiter.onAbort);
    let released = false;
    waiter.resolve({
      release: (answer) => {
        if (released) return;
        released = true;
        this.#answered(answer ?? null, at, probe);
        // A slot of the rate alone held no unit: its end frees nothing for the waiters.
        if (!waiter.unit) return this.#armIdleRelease();
        this.#inFlight--;
        const heldMs = Math.max(0, this.#deps.now() - at);
        this.#durationMs = this.#durationMs === null ? heldMs : 0.8 * this.#durationMs + 0.2 * heldMs;
        this.#pump(true);
        this.#armIdleRelease();
      },
    });
  }

  /** Keeps what an answer said for the next gate call, or tells the gate at once when it cannot wait (HeardSignals.answered). */
  #answered(answer: RateLimitSignals | null, sentAt: number, probe: boolean): void {
    if (this.#heard.answered(answer, sentAt, probe)) void this.#tell();
  }

  #pause(until: number): void {
    this.#pausedUntil = Math.max(this.#pausedUntil, until);
    this.#unpacedUntil = 0;
    this.#stock = this.#stock.filter((at) => at >= this.#pausedUntil);
  }

  /** What the pacer heard since its last gate call, as the gate takes it; the record starts afresh. */
  #takeHeard(): GateSignal {
    return this.#heard.take(this.#deps.now());
  }

  /**
   * Tells the gate now, and drops the slots leased before a pause it answers
   * with. One report at a time: what arrives meanwhile (a burst of 429s) goes
   * in one more. A failure is logged (the provider says it again).
   */
  async #tell(): Promise<void> {
    if (this.#telling) {
      this.#tellAgain = true;
      return;
    }
    this.#telling = true;
    try {
      do {
        this.#tellAgain = false;
        const { pausedForMs } = await this.#deps.gate.report({ signal: this.#takeHeard() });
        if (pausedForMs > 0) this.#pause(this.#deps.now() + pausedForMs);
      } while (this.#tellAgain);
    } catch (error) {
      this.#deps.log(`could not tell the pacing gate what the provider said: ${messageOf(error)}`);
    } finally {
      this.#telling = false;
    }
  }

  /**
   * While its requests are out and it asks nothing, the pacer renews its hold
   * on their units now and then; waiting out a retry (a 429's pause) too: the
   * renewal asks at once, and the gate's answer sets the retry again.
   */
  #armRenew(): void {
    if (this.#renewTimer || this.#units === null) return;
    this.#renewTimer = setTimeout(() => {
      this.#renewTimer = null;
      if (this.#inFlight === 0) return;
      if (this.#retryTimer) clearTimeout(this.#retryTimer);
      this.#retryTimer = null;
      this.#lease();
    }, RENEW_MS);
  }

  /** Requests this pacer may have in flight: the units it holds (all it may use when the gate sets no limit). */
  #usable(): number {
    return this.#units === null ? MAX_UNITS : Math.min(this.#units, MAX_UNITS);
  }

  /** Units worth holding now: the calls in flight and waiting, some headroom, never past {@link MAX_UNITS}. */
  #unitsWanted(): number {
    return Math.min(this.#inFlight + this.#waiters.length - this.#waiters.rateOnly + UNIT_HEADROOM, MAX_UNITS);
  }

  /** How long to wait, after a request ended, for others to end before asking the gate. */
  #coalesceMs(): number {
    const byDuration = this.#durationMs === null ? 0 : Math.min(DURATION_COALESCE_MS, COALESCE_SHARE * this.#durationMs);
    return Math.max(byDuration, Math.min(LEAD_COALESCE_MS, LEAD_SHARE * this.#leadMs));
  }

  /**
   * Asks the gate for slots and units: after `delayMs` (on the retry timer,
   * so nothing else asks meanwhile), else deferred a microtask so a burst of
   * waiters shares one call.
   */
  #lease(delayMs = 0): void {
    if (this.#leasing || this.#retryTimer) return;
    if (delayMs > 0) {
      this.#retryTimer = setTimeout(() => {
        this.#retryTimer = null;
        this.#pump();
      }, delayMs);
      return;
    }
    this.#leasing = true;
    queueMicrotask(() => this.#acquire());
  }

  #acquire(): void {
    if (this.#renewTimer) clearTimeout(this.#renewTimer);
    this.#renewTimer = null;
    const units = this.#unitsWanted();
    // The stock goes to the waiters in order, those of the rate alone first; they need slots whatever the units.
    const rateOnlyWaiting = this.#waiters.rateOnly;
    const rateOnly = Math.max(0, rateOnlyWaiting - this.#stock.length);
    const callsStock = Math.max(0, this.#stock.length - rateOnlyWaiting);
    // Slots for calls only for the units this pacer may use: a slot it cannot start at its time would be wasted or start late.
    const calls = this.#waiters.length - rateOnlyWaiting;
    const slots = rateOnly + Math.max(0, Math.min(calls, units - this.#inFlight) - callsStock);
    const askedAt = this.#deps.now();
    const closes = this.#closes;
    this.#asked = true;
    const request = { caller: this.#deps.caller, slots, rateOnly, inFlight: this.#inFlight, units, signal: this.#takeHeard() };
    this.#deps.gate.acquire(request).then(
      (grant) => {
        this.#leasing = false;
        if (closes !== this.#closes) {
          // Asked before a close: the gate may have taken this caller back in after its release. Closed, it is gone
          // again; reopened since, its grant may count for a holder the gate dropped: it asks afresh. A probe it
          // granted is never sent: say so, or every caller waits for its answer until the gate gives up on it.
          if (grant.probe && grant.startInMs.length > 0) this.#answered(null, this.#deps.now(), true);
          if (this.#closed) return void this.#deps.gate.release({ caller: this.#deps.caller }).catch(() => {});
          return this.#pump();
        }
        const now = this.#deps.now();
        const startsAt = onOurClock(grant.grantedAt, askedAt, now);
        this.#policy = grant.policy;
        this.#units = grant.units;
        this.#starved = grant.units !== null && grant.units < units;
        this.#starvedRounds = this.#starved ? this.#starvedRounds + 1 : 0;
        if (grant.startInMs.length > 0) this.#leadMs = grant.startInMs[0]!;
        this.#unpacedUntil = grant.unpacedForMs > 0 ? now + grant.unpacedForMs : 0;
        // The probe starts at once (offset 0) and the stock is empty until the provider is heard: it is the next slot out.
        if (grant.probe && grant.startInMs.length > 0) this.#probeNext = true;
        for (const offset of grant.startInMs) if (startsAt + offset >= this.#pausedUntil) this.#stock.push(startsAt + offset);
        // Without a free unit, wait for one of ours to end (release pumps), or, when the gate gave us fewer than we
        // asked for, for others' to return or lapse (the timer); slots of the rate alone still short wait for the gate.
        const blocked = this.#inFlight >= this.#usable() && this.#waiters.rateOnly <= this.#stock.length;
        if (blocked ? this.#starved : grant.retryInMs !== null) {
          const starvedMs = Math.min(STARVED_RETRY_MAX_MS, UNIT_RETRY_MS * 2 ** Math.min(this.#starvedRounds - 1, 8));
          this.#retryTimer = setTimeout(
            () => {
              this.#retryTimer = null;
              this.#pump();
            },
            Math.max(grant.retryInMs ?? 0, blocked ? starvedMs : 0),
          );
          // Requests still out keep their units held however long the retry waits.
          if (this.#inFlight > 0) this.#armRenew();
        }
        this.#pump();
      },
      (error: unknown) => {
        this.#leasing = false;
        if (closes !== this.#closes) return this.#closed ? undefined : this.#pump();
        this.#deps.log(`pacing gate unreachable: ${messageOf(error)}; the calls waiting for it fail retryably`);
        const failure = new ToolCallError({
          code: "pacing_unavailable",
          message: `the pacing gate could not be reached: ${messageOf(error)}`,
          retryable: true,
        });
        for (const waiter of this.#waiters.clear()) {
          waiter.signal.removeEventListener("abort", waiter.onAbort);
          waiter.reject(failure);
        }
        // Requests still out keep their units held: the renewal this ask was is tried again.
        if (this.#inFlight > 0 && !this.#closed) this.#armRenew();
      },
    );
  }

  #armIdleRelease(): void {
    if (this.#inFlight > 0 || this.#waiters.length > 0 || this.#units === 0 || this.#units === null || this.#idleTimer) return;
    this.#idleTimer = setTimeout(() => {
      this.#idleTimer = null;
      if (this.#inFlight > 0 || this.#waiters.length > 0) return;
      this.close().catch((error: unknown) =>
        this.#deps.log(`could not return pacing units (they lapse by themselves): ${messageOf(error)}`),
      );
    }, IDLE_RELEASE_MS);
  }
}

/**
 * The gate's `grantedAt` on the pacer's clock. Slots are placed on the
 * gate's clock, so that a slow answer does not shift one caller's slots
 * against another's (the shifted starts would bunch); a clock that
 * disagrees (the gate's time falls outside the call) is moved by as little
 * as makes it agree.
 */
function onOurClock(grantedAt: number, askedAt: number, answeredAt: number): number {
  if (grantedAt < askedAt) return askedAt;
  if (grantedAt > answeredAt) return answeredAt;
  return grantedAt;
}
