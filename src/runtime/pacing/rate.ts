/**
 * Which rate paces one (org, provider), and how 429s move it:
 *
 * - A rate declared for the org (`PUT /v1/pacing/<provider>`) first; else the
 *   quota the provider announces in its answers' headers (`RateLimit-Policy`,
 *   `X-RateLimit-Limit`); else a limit learned from its 429s; else none.
 *   Each is paced at {@link PACE_UTILIZATION} of itself.
 * - A declared or announced rate is a known limit: 429s in a row lower it
 *   gently ({@link DECLARED_RATE_DECREASE}, at most once a second, never
 *   below {@link MIN_RATE_FACTOR}) and it recovers while none arrives. An
 *   isolated 429 at a paced rate is delivery jitter (requests bunched on
 *   their way) and lowers nothing.
 * - An announced quota naming no window (`X-RateLimit-Limit: 100`), when no
 *   reset was heard either, is taken per second: a guess, so it is only a
 *   ceiling. Its 429s are learned from as if nothing were announced (100 a
 *   minute would else get 20 a second at the floor, mostly refused).
 * - A learned limit is measured: the requests the provider admitted in the
 *   second before a 429 (those started, less the 429s reported for them,
 *   counted for {@link LEARN_SETTLE_MS}) are its limit. Until the
 *   measurement the rate drops at once ({@link RATE_DECREASE}); after it the
 *   estimate creeps up ({@link LEARNED_PROBE_PER_SECOND}) so a raised limit
 *   is found again.
 */
import type { StartHistory } from "./history";
import { PACE_UTILIZATION, type PacingPolicy } from "./policy";
import type { Quota } from "./signals";

/** A learned rate is multiplied by this at a 429, until the measured limit replaces it. */
export const RATE_DECREASE = 0.8;
/**
 * A declared or announced rate's factor is multiplied by this after 429s in
 * a row: the limit is known, so they mean jitter or another consumer of the
 * quota, not a wrong guess; a gentle step keeps throughput while repeated
 * 429s still add up.
 */
export const DECLARED_RATE_DECREASE = 0.9;
/** The rate never drops below this share of the declared rate. */
export const MIN_RATE_FACTOR = 0.2;
/** Share of the declared rate regained per second without a 429. */
export const RATE_RECOVERY_PER_SECOND = 0.05;
/** A learned limit grows by this share of itself per second without a 429, while the provider is called. */
export const LEARNED_PROBE_PER_SECOND = 0.005;
/**
 * The most seconds one look at a learned limit creeps it by: callers ask at least every few seconds while they send,
 * and a gate left idle finds nothing out (an hour's quiet would else start the next run at 19 times the limit).
 */
export const LEARNED_PROBE_GAP_S = 5;
/** A 429 this long after the previous one is isolated. */
export const ISOLATED_429_MS = 5000;
/** 429s closer together than this lower the rate once. */
export const DECREASE_DEBOUNCE_MS = 1000;
/**
 * After a 429, a learned limit is measured this long later: the 429s of the
 * requests already sent are counted by then, and so are the starts of every
 * caller that started requests unpaced in the second before it (each tells
 * them with its next call, within its unpaced lease of a second). Measured
 * sooner (300 ms), only the callers that had called since were counted, and
 * a provider allowing 50 a second was learned at 31.
 */
export const LEARN_SETTLE_MS = 1200;
/** A learned rate above this is forgotten (the provider is unlimited again). */
export const LEARNED_RATE_CEILING = 10_000;

/**
 * How long a reset heard counts toward the window of a quota that names none: one odd answer (a penalty box's
 * minute, a clock a second ahead) would else slow the provider for good.
 */
export const RESET_MEMORY_MS = 10 * 60_000;

/** The rate of one (org, provider); see the module comment. */
export class ProviderRate {
  #factor = 1;
  #announced: Quota | null = null;
  /** The longest reset heard in each minute of the last {@link RESET_MEMORY_MS}: a windowless quota's window is their longest. */
  #resets = new Map<number, number>();
  #learned: number | null = null;
  /** A 429's limit measurement waits until `at`, counting the 429s that follow. */
  #measuring: { from: number; at: number } | null = null;
  #lastDecreaseAt = -Infinity;
  #lastLimitedAt = -Infinity;
  #lastRecoveryAt = 0;

  /** The share of a known rate in force after 429s (1: none lately). */
  get factor(): number {
    return this.#factor;
  }

  /** The learned limit, requests per second; null when none. */
  get learned(): number | null {
    return this.#learned;
  }

  /** A limit learned before a restart (the gate stores it): paced at once, creeping from `now` on. */
  restoreLearned(requestsPerSecond: number, now: number): void {
    this.#learned = requestsPerSecond;
    this.#lastRecoveryAt = now;
  }

  /** When a learned limit's measurement is due; null when none is under way. */
  get measuringUntil(): number | null {
    return this.#measuring?.at ?? null;
  }

  /** The 429 a measurement under way counts from: the history must keep the second before it until then. */
  get measuringFrom(): number | null {
    return this.#measuring?.from ?? null;
  }

  /** The announced quota, if any. */
  get announcedQuota(): Quota | null {
    return this.#announced;
  }

  /** The rate to pace at, requests per second; null: nothing paces the provider. */
  effective(policy: PacingPolicy): number | null {
    if (policy.requestsPerSecond !== null) return policy.requestsPerSecond * PACE_UTILIZATION * this.#factor;
    const announced = this.announced();
    if (announced !== null && this.#windowKnown()) return announced * PACE_UTILIZATION * this.#factor;
    // A quota whose window is guessed is a ceiling, not a limit: what its 429s teach paces below it.
    const limit = this.#learned === null ? announced : Math.min(this.#learned, announced ?? Infinity);
    return limit === null ? null : limit * PACE_UTILIZATION;
  }

  /** The rate is known: declared, or announced with a window it names or its resets show (not the guessed second). */
  #known(policy: PacingPolicy): boolean {
    return policy.requestsPerSecond !== null || (this.announced() !== null && this.#windowKnown());
  }

  #windowKnown(): boolean {
    return this.#announced?.windowMs != null || this.#resets.size > 0;
  }

  /** The announced quota's rate; null when none was announced. */
  announced(): number | null {
    const windowMs = this.windowMs();
    return this.#announced && windowMs !== null ? (this.#announced.requests * 1000) / windowMs : null;
  }

  /** The announced quota's window; one that names none is taken as the longest reset heard lately (at least a second). */
  windowMs(): number | null {
    if (!this.#announced) return null;
    return this.#announced.windowMs ?? Math.max(1000, ...this.#resets.values());
  }

  /** What an answer (heard at `now`) said of the quota and of when more is made available. */
  hear({ quota, resetMs, now }: { quota: Quota | null; resetMs: number | null; now: number }): void {
    this.#forgetResets(now);
    if (resetMs !== null) {
      const minute = Math.floor(now / 60_000);
      this.#resets.set(minute, Math.max(this.#resets.get(minute) ?? 0, Math.ceil(resetMs / 1000) * 1000));
    }
    if (quota) this.#announced = quota;
  }

  /** Resets heard longer than {@link RESET_MEMORY_MS} before `now` no longer show a windowless quota's window. */
  #forgetResets(now: number): void {
    const minute = Math.floor(now / 60_000);
    for (const at of this.#resets.keys()) if ((minute - at) * 60_000 >= RESET_MEMORY_MS) this.#resets.delete(at);
  }

  /** `count` 429s were reported at `now` (every caller is paused until `pausedUntil`); see the module comment. */
  rateLimited(
    policy: PacingPolicy,
    { now, count, pausedUntil, history }: { now: number; count: number; pausedUntil: number; history: StartHistory },
  ): void {
    // A reset heard long ago says nothing of the window now: its 429s teach the limit (a guessed window is a ceiling).
    this.#forgetResets(now);
    const isolated = count === 1 && now - this.#lastLimitedAt > ISOLATED_429_MS;
    this.#lastLimitedAt = now;
    if ((isolated && this.effective(policy) !== null) || now - this.#lastDecreaseAt < DECREASE_DEBOUNCE_MS) return;
    this.#lastDecreaseAt = now;
    this.#lastRecoveryAt = Math.max(now, pausedUntil);
    if (this.#known(policy)) {
      this.#factor = Math.max(MIN_RATE_FACTOR, this.#factor * DECLARED_RATE_DECREASE);
      return;
    }
    this.#learned = Math.max(1, (this.#learned ?? Math.max(1, history.started(now - 1000, now))) * RATE_DECREASE);
    this.#measuring ??= { from: now, at: Math.max(pausedUntil, now + LEARN_SETTLE_MS) };
  }

  /** Measures the learned limit once its settling time has passed. */
  settle({ now, pausedUntil, history }: { now: number; pausedUntil: number; history: StartHistory }): void {
    if (!this.#measuring || now < this.#measuring.at) return;
    const { from, at } = this.#measuring;
    this.#measuring = null;
    this.#learned = Math.max(1, history.started(from - 1000, from) - history.limited(from - 1000, at));
    this.#lastRecoveryAt = Math.max(now, pausedUntil);
  }

  /** Time without 429s (and past any pause) lets the rate recover, and a learned limit creep up. */
  recover(policy: PacingPolicy, { now, pausedUntil }: { now: number; pausedUntil: number }): void {
    this.#forgetResets(now);
    const from = Math.max(this.#lastRecoveryAt, pausedUntil);
    if (now <= from) return;
    const seconds = (now - from) / 1000;
    this.#lastRecoveryAt = now;
    if (this.#known(policy)) {
      this.#factor = Math.min(1, this.#factor + seconds * RATE_RECOVERY_PER_SECOND);
    } else if (this.#learned !== null && !this.#measuring) {
      this.#learned *= 1 + Math.min(seconds, LEARNED_PROBE_GAP_S) * LEARNED_PROBE_PER_SECOND;
      if (this.#learned > LEARNED_RATE_CEILING) this.#learned = null;
    }
  }
}
