/**
 * The map-wide circuit breaker. The first run-fatal failure (a receipt or row
 * that could not be persisted) trips it; nothing dispatches after that, and
 * the map fails with the first error.
 */
export class FatalLatch {
  #error: Error | null = null;
  /** Calls that were not sent to a provider because the latch had tripped. */
  prevented = 0;

  get tripped(): Error | null {
    return this.#error;
  }

  trip(error: Error): void {
    this.#error ??= error;
  }

  /** Throws the tripping error, counting the call it prevented. */
  guard(): void {
    if (this.#error) {
      this.prevented++;
      throw this.#error;
    }
  }
}
