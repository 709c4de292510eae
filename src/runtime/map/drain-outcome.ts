/**
 * What stopped a map's chunk dispatch in this invocation, and what the map
 * then does: one object that chunk outcomes are reported to, and one ladder
 * that reads it at the end (most serious first). Reporting never throws; the
 * drain stops dispatching new chunks once {@link DrainOutcome.stopped} says so.
 */
import { codeOf, messageOf, TerminalError } from "../../core/errors";
import type { FatalLatch } from "../../core/latch";
import { SpendCapReached } from "../tools/spend";
import { InfraError, YieldSignal } from "../invocation/yield";

export class DrainOutcome {
  #rowFailure: { key: string; error: string } | null = null;
  #fatal: TerminalError | null = null;
  #infra: unknown = null;
  #died = 0;
  #overBudget = false;
  #ownBlocked = 0;

  constructor(
    private readonly map: string,
    private readonly latch: FatalLatch,
    private readonly signal: AbortSignal,
  ) {}

  /** A row failed under `onRowError: 'fail'`: the map fails with it. */
  rowFailed(sample: { key: string; error: string }): void {
    this.#rowFailure ??= sample;
  }

  /** A chunk's attempt died (lost leases, a rejected late write); `fatal` when it died too often to redispatch again. */
  attemptDied(fatal: TerminalError | null): void {
    this.#died++;
    if (fatal) this.#fatal ??= fatal;
  }

  /** A chunk's attempt wound down (the invocation's budget ran low): the map goes on in the next invocation. */
  woundDown(): void {
    this.#overBudget = true;
  }

  /** A chunk's rows were leased only by other attempts of this run (a key repeated in the input): it runs again at once. */
  ownRowsBlocked(): void {
    this.#ownBlocked++;
  }

  /** A failure that ends the run, whatever else happened (a chunk blocked too long). */
  failed(error: TerminalError): void {
    this.#fatal ??= error;
  }

  /** A chunk's attempt threw: the store or the network failed under it (ignored once the invocation is stopping anyway). */
  infraFailed(error: unknown): void {
    if (!this.signal.aborted && !this.latch.tripped) this.#infra ??= error;
  }

  /**
   * Whether to stop dispatching chunks; also notes when this invocation's
   * budget is spent: its subrequests, or its wall clock (an alarm runs 15
   * minutes at most, and a coordinator waiting on its executors uses little else).
   */
  stopped(budget: { subrequests: number; maxSubrequests: number; elapsedMs: number; maxElapsedMs: number; woundDown?: boolean }): boolean {
    if (this.signal.aborted || this.latch.tripped !== null) return true;
    if (this.#rowFailure || this.#fatal || this.#infra !== null || this.#died > 0) return true;
    this.#overBudget ||=
      budget.woundDown === true || budget.subrequests >= budget.maxSubrequests || budget.elapsedMs >= budget.maxElapsedMs;
    return this.#overBudget;
  }

  /**
   * Throws how the map ends when it cannot complete in this invocation, most
   * serious first: a cancel, the spend cap, a tripped circuit breaker, a failed
   * row, a fatal failure, an infrastructure failure, then the yields (dead
   * attempts, the budget spent, rows leased by another run, rows leased by
   * this run's other chunks). Returns when every chunk is done and the map
   * goes on to finalize.
   */
  throwIfUnfinished(left: number, now: number, blockedUntil: readonly number[]): void {
    this.signal.throwIfAborted();
    const tripped = this.latch.tripped;
    // The cap stopped the map: the run fails saying so (no store failed; nothing was sent past the cap).
    if (tripped instanceof SpendCapReached) throw tripped;
    if (tripped) {
      throw new TerminalError(
        codeOf(tripped) ?? "receipt_store_failed",
        `${tripped.message}; the circuit breaker prevented ${this.latch.prevented} provider calls after the failure (none reached the provider; a rerun makes each once)`,
        { cause: tripped },
      );
    }
    if (this.#rowFailure) {
      const { key, error } = this.#rowFailure;
      throw new TerminalError("row_failed", `map "${this.map}": row ${key} failed (onRowError: 'fail'): ${error}`);
    }
    if (this.#fatal) throw this.#fatal;
    if (this.#infra !== null) throw new InfraError(`map "${this.map}": ${messageOf(this.#infra)}`, this.#infra);
    if (this.#died > 0) {
      throw new YieldSignal(
        now,
        `${this.#died} chunk attempts of "${this.map}" died; the next invocation redispatches them under a new attempt`,
      );
    }
    if (left === 0) return;
    if (this.#overBudget) throw new YieldSignal(now, "this invocation's budget (subrequests or time) is spent");
    // Another run's leases first: a chunk run again before they expire would be blocked again, and count a retry.
    if (blockedUntil.length)
      throw new YieldSignal(
        Math.max(now, Math.min(...blockedUntil)) + 50,
        `${left} chunks of "${this.map}" wait for rows leased by another run`,
      );
    // The run's own attempts that leased them have all ended: nothing to wait for.
    if (this.#ownBlocked > 0)
      throw new YieldSignal(
        now,
        `${this.#ownBlocked} chunks of "${this.map}" run again: keys repeated in the input were leased by other chunks of this run`,
      );
    throw new YieldSignal(now, `${left} chunks of "${this.map}" wait for rows leased by another run`);
  }
}
