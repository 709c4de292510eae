/**
 * What a pacer heard from its provider since its last gate call (429s,
 * requests started unpaced, what answers said of the limit), in local times,
 * turned into durations when the gate is told (`take`).
 */
import type { GateSignal } from "./gate";
import type { Quota, RateLimitSignals } from "./signals";

interface Record {
  limited: number;
  unpacedStarts: number;
  /** When the first and the last of `unpacedStarts` started (local clock). */
  unpacedSince: number | null;
  unpacedLast: number | null;
  /** When the wait a 429 asked for ends (local clock). */
  waitUntil: number | null;
  quota: Quota | null;
  /** What was left, and when the request that said so was sent. */
  remaining: { requests: number; resetMs: number | null; sentAt: number } | null;
  probe: boolean;
}

const nothing = (): Record => ({
  limited: 0,
  unpacedStarts: 0,
  unpacedSince: null,
  unpacedLast: null,
  waitUntil: null,
  quota: null,
  remaining: null,
  probe: false,
});

export class HeardSignals {
  #heard = nothing();
  /** The quota last told to the gate: a different one is news worth a call of its own. */
  #quotaTold: Quota | null = null;

  /** A 429, asking to wait until `waitUntil` (null: it did not say). */
  limited(waitUntil: number | null): void {
    this.#heard.limited++;
    if (waitUntil !== null) this.#heard.waitUntil = Math.max(this.#heard.waitUntil ?? 0, waitUntil);
  }

  /** A request started without a slot (nothing paced the provider). */
  unpacedStart(at: number): void {
    this.#heard.unpacedStarts++;
    this.#heard.unpacedSince ??= at;
    this.#heard.unpacedLast = at;
  }

  /**
   * Keeps what an answer said; true when the gate must hear it at once: the
   * probe's answer, a quota it has not heard, nothing left. An answer with a
   * Retry-After is a rate limit whose wait governs: its remaining count is not read.
   */
  answered(answer: RateLimitSignals | null, sentAt: number, probe: boolean): boolean {
    let urgent = probe;
    if (probe) this.#heard.probe = true;
    if (answer?.quota) {
      this.#heard.quota = answer.quota;
      urgent ||= !sameQuota(answer.quota, this.#quotaTold);
    }
    if (answer?.remaining && answer.retryAfterMs === null) {
      this.#heard.remaining = { ...answer.remaining, sentAt };
      urgent ||= answer.remaining.requests === 0 && answer.remaining.resetMs !== null;
    }
    return urgent;
  }

  /** What was heard, as the gate takes it at `now`; the record starts afresh. */
  take(now: number): GateSignal {
    const { remaining, waitUntil, unpacedSince, unpacedLast, ...heard } = this.#heard;
    this.#heard = nothing();
    if (heard.quota) this.#quotaTold = heard.quota;
    return {
      ...heard,
      retryAfterMs: waitUntil === null ? null : Math.max(0, waitUntil - now),
      ...(unpacedSince === null || unpacedLast === null
        ? {}
        : { unpacedSinceMs: Math.max(0, now - unpacedSince), unpacedLastMs: Math.max(0, now - unpacedLast) }),
      remaining: remaining && { requests: remaining.requests, resetMs: remaining.resetMs, ageMs: Math.max(0, now - remaining.sentAt) },
    };
  }
}

function sameQuota(a: Quota, b: Quota | null): boolean {
  return b !== null && a.requests === b.requests && a.windowMs === b.windowMs;
}
