/**
 * The requests waiting for a pacer's slots, in the order they are served:
 * those that want a slot of the rate alone (no concurrency unit: a recovery
 * lookup its caller cannot go on without) before every other, then the
 * lower rank (src/core/request-rank.ts), then the earlier arrival.
 */
import type { RateLimitSignals } from "./signals";

/** One provider request's permission to go: release it when the request ends. */
export interface PacerSlot {
  /**
   * The request ended; `answer` is what the provider's answer said about its
   * rate limit (null: nothing, or there was no answer). Idempotent.
   */
  release(answer?: RateLimitSignals | null): void;
}

/** One request waiting for a slot. */
export interface Waiter {
  /** Lower goes first; equal ranks in order of arrival. */
  rank: number;
  /** Needs one of the pacer's concurrency units (a call); false: a slot of the rate alone. */
  unit: boolean;
  resolve(slot: PacerSlot): void;
  reject(error: unknown): void;
  signal: AbortSignal;
  onAbort(): void;
}

/** The waiters of one pacer, kept in the order they are served. */
export class WaiterQueue {
  #waiters: Waiter[] = [];

  get length(): number {
    return this.#waiters.length;
  }

  /** The waiter served next. */
  get first(): Waiter | undefined {
    return this.#waiters[0];
  }

  /** Waiters for a slot of the rate alone (all of them ahead of the others). */
  get rateOnly(): number {
    const calls = this.#waiters.findIndex((w) => w.unit);
    return calls === -1 ? this.#waiters.length : calls;
  }

  /** Queues `waiter` after every waiter served before it, and after (or, `again`: before) its equals. */
  add(waiter: Waiter, again: boolean): void {
    const at = this.#waiters.findIndex((w) => {
      const order = servedBefore(waiter, w);
      return again ? order <= 0 : order < 0;
    });
    if (at === -1) this.#waiters.push(waiter);
    else this.#waiters.splice(at, 0, waiter);
  }

  remove(waiter: Waiter): void {
    this.#waiters = this.#waiters.filter((w) => w !== waiter);
  }

  /** Takes the waiter served next. */
  shift(): Waiter | undefined {
    return this.#waiters.shift();
  }

  /** Takes every waiter. */
  clear(): Waiter[] {
    return this.#waiters.splice(0);
  }
}

/** Negative when `a` is served before `b`: slots of the rate alone first, then the lower rank. */
function servedBefore(a: Waiter, b: Waiter): number {
  if (a.unit !== b.unit) return a.unit ? 1 : -1;
  return a.rank === b.rank ? 0 : a.rank < b.rank ? -1 : 1;
}
