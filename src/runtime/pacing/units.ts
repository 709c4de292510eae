/**
 * The concurrency units of one pacing gate: each caller holds some for a
 * lease TTL, renewed by every acquire, and the units held never sum past the
 * policy's limit. When a caller is starved (it wanted more than it holds),
 * the others are trimmed to a fair share as they renew.
 */

/** Concurrency units lapse this long after the holder's last acquire. */
export const HOLDER_TTL_MS = 10_000;

interface Holder {
  units: number;
  wanted: number;
  expiresAt: number;
}

/** Who holds how many of a gate's concurrency units; see the module comment. */
export class ConcurrencyUnits {
  #holders = new Map<string, Holder>();

  /** Callers holding units. */
  get holders(): number {
    return this.#holders.size;
  }

  /** Units held, all callers together. */
  get held(): number {
    let units = 0;
    for (const holder of this.#holders.values()) units += holder.units;
    return units;
  }

  /**
   * Gives `caller` up to `wanted` units under `limit` (its `inFlight` ones
   * kept even under a fair share), renews its lease, and answers how many it
   * holds now; wanting none with none given lets it go.
   */
  grant(limit: number, caller: string, inFlight: number, wanted: number, now: number): number {
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

  /** The caller is done: its units return at once. */
  release(caller: string): void {
    this.#holders.delete(caller);
  }

  /** Lets the leases not renewed within {@link HOLDER_TTL_MS} lapse. */
  expire(now: number): void {
    for (const [id, holder] of this.#holders) if (holder.expiresAt <= now) this.#holders.delete(id);
  }
}
