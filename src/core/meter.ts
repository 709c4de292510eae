/** Counts subrequests (stub calls and provider calls) made by one invocation, and provider retries and 429s. */
export class SubrequestMeter {
  rpc = 0;
  provider = 0;
  /** In-process retries of provider requests (each is also counted in `provider`). */
  retries = 0;
  /** Provider requests answered 429. */
  rateLimited = 0;
  /** Recovery lookups: asking a provider for a taken-over call's result (subrequests, but not calls it counts). */
  lookups = 0;
  /** Requests not sent again because their outcome is unknown and their provider ignores idempotency keys. */
  outcomeUnknown = 0;
  get total(): number {
    return this.rpc + this.provider + this.lookups;
  }
}
