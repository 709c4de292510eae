import { TroupeError } from "./errors";
import { TOO_MANY_SUBREQUESTS } from "./platform-limits";

/**
 * Counts subrequests (stub calls, provider calls, fetches) made by one invocation, and provider retries and 429s.
 *
 * With a `cap` (the platform's, under `PLATFORM_LIMITS=emulate`: see `subrequestCapFor`), counting the
 * subrequest past it throws `too_many_subrequests` ("Too many subrequests.") instead, before the request
 * is made, as the platform's own call would throw. The runtime yields at its policy's budget well before.
 *
 * @example
 * const meter = new SubrequestMeter({ cap: subrequestCapFor(env) });
 * meter.countRpc("sheet.claimRows"); // throws on the 10,001st subrequest under emulation
 */
export class SubrequestMeter {
  readonly cap: number | null;
  #rpc = 0;
  #rpcByKind = new Map<string, number>();
  #provider = 0;
  #lookups = 0;
  #fetches = 0;
  /** In-process retries of provider requests (each is also counted in `provider`, or in `lookups` for a lookup). */
  retries = 0;
  /** Provider requests answered 429. */
  rateLimited = 0;
  /** Requests not sent again because their outcome is unknown and their provider ignores idempotency keys. */
  outcomeUnknown = 0;
  /** Every subrequest counted, whatever counts were set back to 0 since (a run's end records its usage and resets them). */
  #spent = 0;
  #watchers = new Set<(total: number) => void>();

  constructor(options: { cap?: number | null } = {}) {
    this.cap = options.cap ?? null;
  }

  /** Stub calls to our own objects. Setting it to 0 starts the count afresh, its breakdown by kind included. */
  get rpc(): number {
    return this.#rpc;
  }
  set rpc(count: number) {
    this.#admit(count - this.#rpc);
    this.#rpc = count;
    if (count === 0) this.#rpcByKind.clear();
  }

  /**
   * Counts one stub call of `kind` (`<object>.<method>`: `"sheet.claimRows"`, `"receipt.write"`, `"pacing"`),
   * in `rpc` and in its breakdown {@link rpcByKind}.
   */
  countRpc(kind: string): void {
    this.rpc++;
    this.#rpcByKind.set(kind, (this.#rpcByKind.get(kind) ?? 0) + 1);
  }

  /** `rpc` by kind; stub calls counted without one (`rpc++`, or added in bulk) are `"other"`. */
  get rpcByKind(): Record<string, number> {
    const byKind = Object.fromEntries(this.#rpcByKind);
    const other = this.#rpc - [...this.#rpcByKind.values()].reduce((sum, n) => sum + n, 0);
    if (other > 0) byKind.other = other;
    return byKind;
  }

  /** Provider requests (a batch counts once; retries included). */
  get provider(): number {
    return this.#provider;
  }
  set provider(count: number) {
    this.#admit(count - this.#provider);
    this.#provider = count;
  }

  /** Recovery lookups: asking a provider for a taken-over call's result (subrequests, but not calls it counts). */
  get lookups(): number {
    return this.#lookups;
  }
  set lookups(count: number) {
    this.#admit(count - this.#lookups);
    this.#lookups = count;
  }

  /** A play's `ctx.fetch` requests, each redirect hop included. */
  get fetches(): number {
    return this.#fetches;
  }
  set fetches(count: number) {
    this.#admit(count - this.#fetches);
    this.#fetches = count;
  }

  /** The invocation's subrequests so far: what its budget and the platform's cap are about (counts set back to 0 do not lower it). */
  get total(): number {
    return this.#spent;
  }

  /** Calls `watcher` with {@link total} after each subrequest counted, until the returned function is called. */
  watch(watcher: (total: number) => void): () => void {
    this.#watchers.add(watcher);
    return () => void this.#watchers.delete(watcher);
  }

  #admit(added: number): void {
    if (added <= 0) return;
    if (this.cap !== null && this.#spent + added > this.cap) {
      throw new TroupeError("too_many_subrequests", TOO_MANY_SUBREQUESTS, { details: { cap: this.cap } });
    }
    this.#spent += added;
    for (const watcher of this.#watchers) watcher(this.#spent);
  }
}
