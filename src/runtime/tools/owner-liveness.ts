/**
 * Whether the owner of a `running` receipt can still finish it. A receipt
 * owned by a dead attempt is taken over at once; a live one is waited for.
 *
 * Dead means: the owner's run has ended (or does not exist), or the run has
 * moved to a newer attempt epoch, which fences the owner's writes off.
 * Attempts of the caller's own run are judged by the receipt shard (a newer
 * attempt of the same run takes over by itself), except the play's own calls
 * (`ctx.tool` outside a map): the coordinator runs one invocation of a run at a
 * time, so to an invocation making them, those of an earlier invocation are
 * dead (it crashed, or was evicted, while they were pending) even in the same
 * epoch, and are taken over as such: asked after or failed `outcome_unknown`,
 * not sent again as if nothing had been sent.
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
  /** Set in the coordinator's invocation of the run: the id its play-level attempts carry ({@link playAttemptId}). */
  invocation?: string;
  now(): number;
}

/**
 * The attempt of the play's own calls in one invocation of a run: `n` counts the generations of that invocation
 * (a new one after a lost lease). The invocation's id tells it apart from the calls an earlier invocation left.
 */
export function playAttemptId(runId: string, attemptSeq: number, invocation: string, n: number): string {
  return `${runId}/play/${attemptSeq}@${invocation}${n ? `.${n}` : ""}`;
}

/** Whether `attemptId` is a play-level attempt of `runId` made by an invocation other than `invocation`. */
function ofAnotherInvocation(attemptId: string, runId: string, invocation: string): boolean {
  const prefix = `${runId}/play/`;
  if (!attemptId.startsWith(prefix)) return false;
  // Before invocation ids (`<run>/play/<seq>[.<n>]`): made by an earlier invocation too.
  const made = /^\d+(?:@([^.]+))?(?:\.\d+)?$/.exec(attemptId.slice(prefix.length));
  return made !== null && made[1] !== invocation;
}

/** Judges the owners of running receipts, caching each other run's answer briefly. */
export class OwnerLiveness {
  #deps: OwnerLivenessOptions;
  #cache = new Map<string, { at: number; run: Promise<{ status: string; runAttempt: number } | null> }>();

  constructor(options: OwnerLivenessOptions) {
    this.#deps = options;
  }

  async isDead(owner: AttemptRef): Promise<boolean> {
    if (owner.runId === this.#deps.runId) {
      const { invocation } = this.#deps;
      return invocation !== undefined && ofAnotherInvocation(owner.attemptId, owner.runId, invocation);
    }
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
