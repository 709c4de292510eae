/**
 * The arithmetic of one (org, provider) pacing gate, free of Cloudflare: the
 * PacingGate object holds one `GateLedger` in memory and feeds it the clock.
 *
 * - **Rate.** Slots are handed out on a virtual schedule (GCRA): each slot
 *   starts one interval after the previous one, whoever asked for it, so the
 *   rate holds across every caller. A caller leases several slots at once (up
 *   to {@link SLOT_HORIZON_MS} ahead) and waits for each slot's start itself,
 *   so the gate costs one call per lease, not one per provider request.
 * - **Concurrency.** Callers hold concurrency units for a lease TTL, renewed
 *   by every acquire; the units held never sum past the policy's limit. When
 *   a caller is starved, the others are trimmed to a fair share as they renew.
 * - **Backpressure.** A reported 429 pauses every caller until its
 *   Retry-After and lowers the rate (multiplicatively, at most once a
 *   second); the rate recovers additively while no 429 arrives. A provider
 *   with no declared rate gets one learned from the rate that drew the 429.
 *
 * State is memory only: a restarted gate starts a fresh schedule, which at
 * worst lets one horizon of slots overlap (the provider's 429s then slow it).
 */
import { PACE_UTILIZATION, type PacingPolicy } from "./policy";

/** Slots are leased at most this far ahead of now. */
export const SLOT_HORIZON_MS = 1000;
/** Concurrency units lapse this long after the holder's last acquire. */
export const HOLDER_TTL_MS = 10_000;
/** Most slots one lease carries. */
export const MAX_SLOTS_PER_LEASE = 500;
/** A learned rate (the provider declares none) is multiplied by this after a 429. */
export const RATE_DECREASE = 0.7;
/**
 * A declared rate's factor is multiplied by this after a 429: the limit is
 * known, so a 429 means jitter or another consumer of the quota, not a wrong
 * guess; a gentle step keeps throughput while repeated 429s still add up.
 */
export const DECLARED_RATE_DECREASE = 0.9;
/** The rate never drops below this share of the declared rate. */
export const MIN_RATE_FACTOR = 0.2;
/** Share of the declared rate regained per second without a 429. */
export const RATE_RECOVERY_PER_SECOND = 0.05;
/** 429s closer together than this lower the rate once. */
export const DECREASE_DEBOUNCE_MS = 1000;
/** A learned rate above this is forgotten (the provider is unlimited again). */
export const LEARNED_RATE_CEILING = 10_000;
/** A caller refused concurrency asks again after this long. */
export const CONCURRENCY_RETRY_MS = 25;
/** While nothing paces the provider, a caller may start requests without asking for this long. */
export const UNPACED_LEASE_MS = 1000;

/** One caller asking for slots and concurrency. */
export interface AcquireRequest {
  /** Stable for one caller (one invocation of one run). */
  caller: string;
  /** New slots wanted now. */
  slots: number;
  /** The caller's provider requests in flight. */
  inFlight: number;
  /** Concurrency units wanted in all (in flight, waiting, and some headroom); at least `inFlight + slots` is assumed. */
  units?: number;
  now: number;
}

/** What the gate leased to a caller. */
export interface Grant {
  /** When each granted slot may start, as offsets from the gate's now (ascending). */
  startInMs: number[];
  /** Concurrency units the caller holds now; null: no concurrency limit. */
  units: number | null;
  /** When nothing was granted: ask again after this long. */
  retryInMs: number | null;
  /**
   * Nothing paces the provider now (no declared or learned rate, no pause):
   * for this long the caller may start requests within its units without
   * asking for slots. 0 when paced.
   */
  unpacedForMs: number;
  policy: PacingPolicy;
}

interface Holder {
  units: number;
  wanted: number;
  expiresAt: number;
}

/** A snapshot for diagnostics and tests. */
export interface GateSnapshot {
  effectiveRequestsPerSecond: number | null;
  rateFactor: number;
  learnedRequestsPerSecond: number | null;
  pausedUntil: number;
  holders: number;
  unitsHeld: number;
  backpressureReports: number;
  /** Slots granted so far, and the most whose starts fell within any one second (what the rate bounds). */
  slotsGranted: number;
  maxSlotsPerSecond: number;
}

/** The pacing state of one (org, provider); see the module comment. */
export class GateLedger {
  #nextSlotAt = 0;
  #pausedUntil = 0;
  #rateFactor = 1;
  #learnedRps: number | null = null;
  #lastDecreaseAt = -Infinity;
  #lastRecoveryAt = 0;
  #reports = 0;
  /** Start times of slots granted in the last second (to learn a rate from). */
  #recent: number[] = [];
  #holders = new Map<string, Holder>();
  #slotsGranted = 0;
  #maxSlotsPerSecond = 0;

  /** Grants up to `request.slots` slots and the caller's concurrency units. */
  acquire(policy: PacingPolicy, request: AcquireRequest): Grant {
    const { caller, now, inFlight } = request;
    this.#recover(policy, now);
    this.#expire(now);
    let slots = Math.max(0, Math.min(request.slots, MAX_SLOTS_PER_LEASE));
    let units: number | null = null;
    if (policy.concurrency !== null) {
      units = this.#units(policy.concurrency, caller, inFlight, Math.max(request.units ?? 0, inFlight + slots), now);
      slots = Math.min(slots, Math.max(0, units - inFlight));
    }
    const startInMs: number[] = [];
    const rps = this.#effectiveRps(policy);
    const earliest = Math.max(now, this.#pausedUntil);
    for (let i = 0; i < slots; i++) {
      const at = rps === null ? earliest : Math.max(earliest, this.#nextSlotAt);
      if (at - now > SLOT_HORIZON_MS) break;
      if (rps !== null) this.#nextSlotAt = at + 1000 / rps;
      startInMs.push(at - now);
      this.#recent.push(at);
      this.#slotsGranted++;
      this.#maxSlotsPerSecond = Math.max(this.#maxSlotsPerSecond, this.#recent.length - firstAfter(this.#recent, at - 1000));
    }
    this.#trimRecent(now);
    let retryInMs: number | null = null;
    if (startInMs.length === 0 && request.slots > 0) {
      const blockedByUnits = units !== null && units <= inFlight;
      const slotAt = Math.max(earliest, rps === null ? earliest : this.#nextSlotAt);
      retryInMs = blockedByUnits ? CONCURRENCY_RETRY_MS : Math.max(1, slotAt - now - SLOT_HORIZON_MS);
    }
    const unpacedForMs = rps === null && this.#pausedUntil <= now ? UNPACED_LEASE_MS : 0;
    return { startInMs, units, retryInMs, unpacedForMs, policy };
  }

  /**
   * A provider answered 429: every caller waits until `now + retryAfterMs`,
   * and the rate drops (once per {@link DECREASE_DEBOUNCE_MS}).
   */
  report(policy: PacingPolicy, { retryAfterMs, now }: { retryAfterMs: number; now: number }): void {
    this.#reports++;
    this.#pausedUntil = Math.max(this.#pausedUntil, now + Math.max(0, retryAfterMs));
    this.#nextSlotAt = Math.max(this.#nextSlotAt, this.#pausedUntil);
    if (now - this.#lastDecreaseAt < DECREASE_DEBOUNCE_MS) return;
    this.#lastDecreaseAt = now;
    this.#lastRecoveryAt = Math.max(now, this.#pausedUntil);
    if (policy.requestsPerSecond !== null) {
      this.#rateFactor = Math.max(MIN_RATE_FACTOR, this.#rateFactor * DECLARED_RATE_DECREASE);
    } else {
      this.#trimRecent(now);
      const observed = this.#recent.filter((t) => t <= now).length;
      this.#learnedRps = Math.max(1, (this.#learnedRps ?? Math.max(1, observed)) * RATE_DECREASE);
    }
  }

  /** The caller is done: its concurrency units return at once. */
  release(caller: string): void {
    this.#holders.delete(caller);
  }

  snapshot(policy: PacingPolicy, now: number): GateSnapshot {
    this.#expire(now);
    let unitsHeld = 0;
    for (const holder of this.#holders.values()) unitsHeld += holder.units;
    return {
      effectiveRequestsPerSecond: this.#effectiveRps(policy),
      rateFactor: this.#rateFactor,
      learnedRequestsPerSecond: this.#learnedRps,
      pausedUntil: this.#pausedUntil,
      holders: this.#holders.size,
      unitsHeld,
      backpressureReports: this.#reports,
      slotsGranted: this.#slotsGranted,
      maxSlotsPerSecond: this.#maxSlotsPerSecond,
    };
  }

  #effectiveRps(policy: PacingPolicy): number | null {
    if (policy.requestsPerSecond !== null) return policy.requestsPerSecond * PACE_UTILIZATION * this.#rateFactor;
    return this.#learnedRps;
  }

  #units(limit: number, caller: string, inFlight: number, wanted: number, now: number): number {
    let others = 0;
    let starved = false;
    for (const [id, holder] of this.#holders) {
      if (id === caller) continue;
      others += holder.units;
      starved ||= holder.wanted > holder.units;
    }
    let cap = Math.max(0, limit - others);
    if (starved) {
      const live = this.#holders.size + (this.#holders.has(caller) ? 0 : 1);
      cap = Math.min(cap, Math.max(Math.ceil(limit / live), inFlight));
    }
    const units = Math.min(wanted, cap);
    if (units === 0 && wanted === 0) this.#holders.delete(caller);
    else this.#holders.set(caller, { units, wanted, expiresAt: now + HOLDER_TTL_MS });
    return units;
  }

  #recover(policy: PacingPolicy, now: number): void {
    const from = Math.max(this.#lastRecoveryAt, this.#pausedUntil);
    if (now <= from) return;
    const seconds = (now - from) / 1000;
    this.#lastRecoveryAt = now;
    if (policy.requestsPerSecond !== null) {
      this.#rateFactor = Math.min(1, this.#rateFactor + seconds * RATE_RECOVERY_PER_SECOND);
    } else if (this.#learnedRps !== null) {
      this.#learnedRps += seconds * Math.max(1, this.#learnedRps * RATE_RECOVERY_PER_SECOND * 2);
      if (this.#learnedRps > LEARNED_RATE_CEILING) this.#learnedRps = null;
    }
  }

  #expire(now: number): void {
    for (const [id, holder] of this.#holders) if (holder.expiresAt <= now) this.#holders.delete(id);
  }

  #trimRecent(now: number): void {
    let drop = 0;
    while (drop < this.#recent.length && this.#recent[drop]! <= now - 1000) drop++;
    if (drop) this.#recent.splice(0, drop);
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
