/**
 * Bounded dispatch waves, map-wide: at most `size` provider calls (batch
 * members counted one each) may be billed and not yet persisted at once.
 * A call enters before it goes to the provider and leaves once its receipt
 * is written (completed or failed). The latch is read at every entry, so
 * after the first persistence failure nothing more is sent: the calls billed
 * into a broken store are at most one window's worth.
 *
 * Entry is first come, first served; a batch larger than the window enters
 * alone once the window is empty.
 */
import type { FatalLatch } from "../../core/latch";

interface Entrant {
  weight: number;
  resolve(): void;
  reject(error: unknown): void;
  signal: AbortSignal;
  onAbort(): void;
}

/** One map's window of billed-but-unpersisted calls; see the module comment. */
export class DispatchWindow {
  readonly size: number;
  #latch: FatalLatch;
  #inFlight = 0;
  #queue: Entrant[] = [];

  constructor(options: { size: number; latch: FatalLatch }) {
    if (!(options.size >= 1)) throw new Error(`the dispatch window needs a size of at least 1, got ${options.size}`);
    this.size = options.size;
    this.#latch = options.latch;
    options.latch.onTrip(() => {
      for (const entrant of this.#queue.splice(0)) {
        entrant.signal.removeEventListener("abort", entrant.onAbort);
        entrant.reject(this.#latch.prevent(entrant.weight));
      }
    });
  }

  /** Calls billed and not yet persisted (for tests and progress). */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Whether `weight` calls entering now would wait for room (or behind others waiting). */
  wouldWait(weight: number): boolean {
    return this.#queue.length > 0 || !this.#fits(weight);
  }

  /** Calls waiting for room: only written receipts make it. */
  get waiting(): number {
    return this.#queue.length;
  }

  /**
   * Waits for room for `weight` calls. Throws the latch's error (counting the
   * calls as prevented) if it has tripped or trips while waiting.
   */
  enter(weight: number, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    if (this.#latch.tripped) return Promise.reject(this.#latch.prevent(weight));
    if (this.#queue.length === 0 && this.#fits(weight)) {
      this.#inFlight += weight;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const entrant: Entrant = {
        weight,
        resolve,
        reject,
        signal,
        onAbort: () => {
          this.#queue = this.#queue.filter((e) => e !== entrant);
          reject(signal.reason);
          this.#admit();
        },
      };
      signal.addEventListener("abort", entrant.onAbort, { once: true });
      this.#queue.push(entrant);
    });
  }

  /** `weight` calls are persisted (or never reached the provider): room for others. */
  leave(weight: number): void {
    this.#inFlight = Math.max(0, this.#inFlight - weight);
    this.#admit();
  }

  #fits(weight: number): boolean {
    return this.#inFlight === 0 || this.#inFlight + weight <= this.size;
  }

  #admit(): void {
    while (this.#queue.length > 0 && !this.#latch.tripped && this.#fits(this.#queue[0]!.weight)) {
      const entrant = this.#queue.shift()!;
      entrant.signal.removeEventListener("abort", entrant.onAbort);
      this.#inFlight += entrant.weight;
      entrant.resolve();
    }
  }
}
