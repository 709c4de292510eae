/**
 * The map-wide circuit breaker. The first run-fatal failure (a receipt or row
 * that could not be persisted) trips it; nothing dispatches after that, and
 * the map fails with the first error and the count of calls it prevented.
 */
export class FatalLatch {
  #error: Error | null = null;
  #listeners = new Set<(error: Error) => void>();
  /** Calls that were not sent to a provider because the latch had tripped. */
  prevented = 0;

  get tripped(): Error | null {
    return this.#error;
  }

  /** Trips the latch (the first error wins); listeners hear it once. */
  trip(error: Error): void {
    if (this.#error) return;
    this.#error = error;
    for (const listener of this.#listeners) listener(error);
    this.#listeners.clear();
  }

  /** Calls `listener` when the latch trips (at once if it has); the answer stops listening. */
  onTrip(listener: (error: Error) => void): () => void {
    if (this.#error) listener(this.#error);
    else this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Throws the tripping error, counting the call it prevented. */
  guard(): void {
    if (this.#error) {
      this.prevented++;
      throw this.#error;
    }
  }

  /** Counts `calls` prevented by the tripped latch and returns its error. */
  prevent(calls: number): Error {
    this.prevented += calls;
    return this.#error!;
  }
}
