/**
 * Whether the owner of a `running` receipt can still finish it. A receipt
 * owned by a dead attempt is taken over at once; a live one is waited for.
 *
 * Dead means: the owner's run has ended (or does not exist), or the run has
 * moved to a newer attempt epoch, which fences the owner's writes off.
 * Attempts of the caller's own run are judged by the receipt shard (a newer
 * attempt of the same run takes over by itself).
 */
import type { AttemptRef } from "../../contracts/shards";
import { isTerminal } from "../../core/statuses";

/** How long an answer about another run is trusted. */
const LIVENESS_TTL_MS = 1000;

/** How to look another run up, and which run is asking. */
export interface OwnerLivenessOptions {
  /** Looks up another run of the org: its status and attempt epoch, or null when it does not exist. */
  lookup(runId: string): Promise<{ status: string; runAttempt: number } | null>;
  runId: string;
  now(): number;
}

/** Judges the owners of running receipts, caching each other run's answer briefly. */
export class OwnerLiveness {
  #deps: OwnerLivenessOptions;
  #cache = new Map<string, { at: number; run: Promise<{ status: string; runAttempt: number } | null> }>();

  constructor(options: OwnerLivenessOptions) {
    this.#deps = options;
  }

  async isDead(owner: AttemptRef): Promise<boolean> {
    if (owner.runId === this.#deps.runId) return false;
    const now = this.#deps.now();
    let entry = this.#cache.get(owner.runId);
    if (!entry || now - entry.at > LIVENESS_TTL_MS) {
      entry = { at: now, run: this.#deps.lookup(owner.runId) };
      this.#cache.set(owner.runId, entry);
    }
    const run = await entry.run;
    return run === null || isTerminal(run.status) || run.runAttempt > owner.attemptSeq;
  }
}
