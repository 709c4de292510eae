/**
 * The receipt completion ladder: a provider call succeeded (and was billed)
 * but its receipt could not be completed. The completion is retried after
 * each delay of the ladder (1 s, 3 s, 9 s in production), never past the run's
 * deadline. When it still fails, the caller keeps the exact output in a
 * salvage record: billed data is never memory-only.
 *
 * One ladder per map: once one call has climbed the whole ladder in vain the
 * store is known broken, and later failures give up at once instead of each
 * waiting out the ladder again. A ladder already climbing keeps its budget.
 */

/** The ladder's rungs and the deadline that bounds it. */
export interface CompletionLadderOptions {
  /** The waits between attempts; its length is the number of retries. */
  delaysMs: readonly number[];
  /** The run's deadline (ms since the epoch): no retry is scheduled past it. */
  deadlineAt: number;
  now(): number;
}

/** Thrown when the ladder gives up: the last error and how many attempts were made. */
export class LadderExhausted extends Error {
  constructor(
    readonly attempts: number,
    readonly last: unknown,
  ) {
    super(last instanceof Error ? last.message : String(last), { cause: last });
  }
}

/** One map's completion ladder; see the module comment. */
export class CompletionLadder {
  #deps: CompletionLadderOptions;
  #exhausted = false;

  constructor(options: CompletionLadderOptions) {
    this.#deps = options;
  }

  /**
   * Runs `attempt` until it succeeds or the ladder is spent. `onFailure` hears
   * every failure (the first one trips the latch); `sleep` waits between
   * attempts (the caller parks it so bulk calls keep flowing).
   *
   * @throws LadderExhausted
   */
  async run<T>(options: {
    attempt: () => Promise<T>;
    onFailure(error: unknown): void;
    sleep(ms: number): Promise<void>;
    signal: AbortSignal;
  }): Promise<T> {
    let attempts = 0;
    for (;;) {
      try {
        attempts++;
        return await options.attempt();
      } catch (error) {
        options.onFailure(error);
        const delay = this.#deps.delaysMs[attempts - 1];
        const climbing = attempts > 1;
        if (
          delay === undefined ||
          options.signal.aborted ||
          (this.#exhausted && !climbing) ||
          this.#deps.now() + delay > this.#deps.deadlineAt
        ) {
          this.#exhausted = true;
          throw new LadderExhausted(attempts, error);
        }
        await options.sleep(delay).catch(() => {
          // Aborted while waiting: the loop gives up on its next failure check.
        });
        if (options.signal.aborted) {
          this.#exhausted = true;
          throw new LadderExhausted(attempts, error);
        }
      }
    }
  }
}
