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
 * meter.rpc++; // throws on the 10,001st subrequest under emulation
 */
export class SubrequestMeter {
  readonly cap: number | null;
  #rpc = 0;
  #provider = 0;
  #lookups = 0;
  #fetches = 0;
  /** In-process retries of provider requests (each is also counted in `provider`). */
  retries = 0;
  /** Provider requests answered 429. */
  rateLimited = 0;
  /** Requests not sent again because their outcome is unknown and their provider ignores idempotency keys. */
  outcomeUnknown = 0;

  constructor(options: { cap?: number | null } = {}) {
    this.cap = options.cap ?? null;
  }

  /** Stub calls to our own objects. */
  get rpc(): number {
    return this.#rpc;
  }
  set rpc(count: number) {
    this.#admit(count - this.#rpc);
    this.#rpc = count;
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

  get total(): number {
    return this.#rpc + this.#provider + this.#lookups + this.#fetches;
  }

  #admit(added: number): void {
    if (this.cap !== null && added > 0 && this.total + added > this.cap) {
      throw new TroupeError("too_many_subrequests", TOO_MANY_SUBREQUESTS, { details: { cap: this.cap } });
    }
  }
}
