/**
 * In-process retries of provider calls: how long to wait before the next
 * attempt, how many attempts a failure deserves, and the run's retry budget.
 */

export interface RetryPolicy {
  /** Attempts of a call failing with a retryable error other than 429 (the first included). */
  providerAttempts: number;
  /** Attempts of a call answered 429: rate limiting is pacing, not a defect, so it gets more patience. */
  rateLimitAttempts: number;
  /** The first retry's delay; each later one doubles it. */
  providerRetryBaseMs: number;
  /** No delay is longer than this, whatever the provider's Retry-After says. */
  providerRetryMaxMs: number;
}

/** How a failed attempt is classified for retrying. */
export type RetryClass = { kind: "permanent" } | { kind: "transient" } | { kind: "rate_limited"; retryAfterMs: number | null };

/**
 * The delay before attempt `attempt + 1` after attempt `attempt` failed:
 * base × 2^(attempt − 1), at least the provider's Retry-After, capped.
 *
 * @example retryDelayMs(policy, 3, 0) // 4 × base, unless that passes the cap
 */
export function retryDelayMs(
  policy: Pick<RetryPolicy, "providerRetryBaseMs" | "providerRetryMaxMs">,
  attempt: number,
  retryAfterMs: number | null,
): number {
  const escalated = policy.providerRetryBaseMs * 2 ** Math.max(0, attempt - 1);
  return Math.min(policy.providerRetryMaxMs, Math.max(escalated, retryAfterMs ?? 0));
}

/** Whether a call that failed on `attempt` (counting from 1) with `failure` may try again. */
export function mayRetry(
  policy: Pick<RetryPolicy, "providerAttempts" | "rateLimitAttempts">,
  failure: RetryClass,
  attempt: number,
): boolean {
  switch (failure.kind) {
    case "permanent":
      return false;
    case "transient":
      return attempt < policy.providerAttempts;
    case "rate_limited":
      return attempt < policy.rateLimitAttempts;
  }
}

/**
 * A run's budget of in-process retries, shared by every call of the run:
 * a storm of failures stays bounded (and loud) instead of retrying forever.
 * Seeded with what earlier invocations of the run left.
 */
export class RetryBudget {
  #left: number;
  #spent = 0;
  #exhaustedNoted = false;

  constructor(options: { remaining: number }) {
    this.#left = Math.max(0, options.remaining);
  }

  /** Takes one retry; false when none is left. */
  take(): boolean {
    if (this.#left <= 0) return false;
    this.#left--;
    this.#spent++;
    return true;
  }

  /** Retries taken through this budget. */
  get spent(): number {
    return this.#spent;
  }

  /** True once, the first time the budget ran out (for one log line). */
  noteExhausted(): boolean {
    if (this.#left > 0 || this.#exhaustedNoted) return false;
    this.#exhaustedNoted = true;
    return true;
  }
}
