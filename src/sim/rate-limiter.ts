/**
 * A sliding one-second window over admitted requests, kept in memory: the
 * simulator's rate limit need not survive a restart.
 */

/** The verdict on one request. */
export type Admission = { admitted: true } | { admitted: false; retryAfterMs: number };

/** The window's length; the limit is per this many milliseconds. */
export const RATE_WINDOW_MS = 1000;

/**
 * Admits at most `limit` requests in any window of {@link RATE_WINDOW_MS}.
 * Rejected requests do not occupy the window.
 *
 * @example
 * const limiter = new SlidingWindowLimiter();
 * limiter.admit(Date.now(), 10); // { admitted: true }
 */
export class SlidingWindowLimiter {
  /** Times of admitted requests, oldest first. */
  #admittedAt: number[] = [];

  /** Decides on a request arriving at `nowMs`; `limit` null means unlimited. */
  admit(nowMs: number, limit: number | null): Admission {
    const horizon = nowMs - RATE_WINDOW_MS;
    let expired = 0;
    while (expired < this.#admittedAt.length && this.#admittedAt[expired]! <= horizon) expired++;
    if (expired > 0) this.#admittedAt.splice(0, expired);
    if (limit !== null && this.#admittedAt.length >= limit) {
      // The request fits once the oldest admission that keeps the window full leaves it.
      const freesAt = this.#admittedAt[this.#admittedAt.length - limit]! + RATE_WINDOW_MS;
      return { admitted: false, retryAfterMs: Math.max(1, freesAt - nowMs) };
    }
    this.#admittedAt.push(nowMs);
    return { admitted: true };
  }

  /**
   * The window as a provider's headers state it, after the requests so far:
   * how many more `limit` admits now, and in how long more is made available
   * (the oldest admission leaves the window; 0 when it is empty).
   */
  state(nowMs: number, limit: number): { remaining: number; resetMs: number } {
    const live = this.#admittedAt.filter((at) => at > nowMs - RATE_WINDOW_MS);
    const oldest = live[0];
    return {
      remaining: Math.max(0, limit - live.length),
      resetMs: oldest === undefined ? 0 : Math.max(0, oldest + RATE_WINDOW_MS - nowMs),
    };
  }

  /** Forgets every admission. */
  clear(): void {
    this.#admittedAt = [];
  }
}

/**
 * The most requests seen in any window of {@link RATE_WINDOW_MS}, admitted
 * or not: what callers actually sent, for checking their pacing.
 */
export class ArrivalWindow {
  #arrivals: number[] = [];

  /** Records a request arriving at `nowMs`; returns how many arrived in the window ending now. */
  record(nowMs: number): number {
    const horizon = nowMs - RATE_WINDOW_MS;
    let expired = 0;
    while (expired < this.#arrivals.length && this.#arrivals[expired]! <= horizon) expired++;
    if (expired > 0) this.#arrivals.splice(0, expired);
    this.#arrivals.push(nowMs);
    return this.#arrivals.length;
  }

  clear(): void {
    this.#arrivals = [];
  }
}
