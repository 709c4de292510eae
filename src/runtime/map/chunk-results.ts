/**
 * What a map's drain (map-runner.ts) makes of each chunk's result: an
 * attempt's summary recorded as its chunk's outcome (done, blocked, died,
 * wound down, sent back whole), or the chunks a rerun's sweep found wholly
 * reused, recorded as their attempts would have been; the map's progress told
 * either way.
 */
import type { ChunkRecord, RunStore } from "../../stores/run-store";
import type { InvocationScope } from "../invocation/scope";
import type { AttemptOutcome, ChunkSummary } from "./chunk-executor";
import { attemptDied, attemptWoundDown, blockedTooLong, ownRowsBlocked } from "./chunk-outcomes";
import type { DrainOutcome } from "./drain-outcome";
import type { MapProgressFeed } from "./map-progress";

export interface ChunkResultsOptions {
  map: string;
  scope: Pick<InvocationScope, "log" | "policy" | "meter" | "run">;
  store: RunStore;
  feed: MapProgressFeed;
  outcome: DrainOutcome;
  /** `onRowError: 'fail'`: a failed row fails the map. */
  failOnRow: boolean;
  /** A chunk was done with every row reused (a rerun, so far): sweeps may take the chunks after it. */
  reusedOnly(): void;
}

export class ChunkResults {
  #deps: ChunkResultsOptions;
  /** Per chunk found blocked by another run, when its earliest such row's lease expires: the run wakes to retry then. */
  readonly blockedUntil: number[] = [];

  constructor(options: ChunkResultsOptions) {
    this.#deps = options;
  }

  /** The attempt of epoch `attemptSeq` at `chunk` ended with `summary`. */
  attempted(chunk: ChunkRecord, attemptSeq: number, summary: AttemptOutcome): void {
    const { map, store, feed, outcome, scope } = this.#deps;
    const idx = chunk.idx;
    const outcomes = { scope, store };
    if (summary.lost || summary.rejected.length) {
      outcome.attemptDied(attemptDied(outcomes, { map, idx, attemptSeq }, summary));
      return;
    }
    // Wound down (its invocation's budget ran low): the next invocation runs the rows it left.
    if (summary.deferred?.length) {
      const stalled = attemptWoundDown(
        outcomes,
        { map, idx, attemptSeq, resume: chunk.resume },
        { ...summary, deferred: summary.deferred },
      );
      outcome.woundDown();
      if (stalled) outcome.failed(stalled);
      this.#rowFailures(summary);
      feed.tell(map, false);
      return;
    }
    const done = summary.blocked.length === 0;
    const computed = summary.completed + summary.failed - summary.reused;
    // Leased by other runs: the chunk waits for their leases, a retry counted. Leased only by the run's own attempts
    // (a key repeated in the input): those have ended when the map looks at what is left, so it runs again at once.
    const byOthers = summary.blocked.filter((b) => b.ownerRunId !== scope.run.runId);
    if (!done && byOthers.length === 0) {
      // Its rows count in the map's rate when the chunk ends, with the rows run again (as a wound-down chunk's do):
      // the continuation's summary carries these.
      ownRowsBlocked(outcomes, { map, idx, attemptSeq, rows: chunk.rows }, summary);
      outcome.ownRowsBlocked();
      this.#rowFailures(summary);
      feed.tell(map, false);
      return;
    }
    if (!done) this.blockedUntil.push(Math.min(...byOthers.map((b) => b.leaseExpiresAt)));
    store.finishChunk(map, idx, {
      done,
      completed: summary.completed,
      failed: summary.failed,
      reused: summary.reused,
      // Another run first: the progress names the first one's owner as what the map waits for.
      blocked: [...byOthers, ...summary.blocked.filter((b) => b.ownerRunId === scope.run.runId)],
      failureSamples: summary.failureSamples,
    });
    if (!done && chunk.retries + 1 > scope.policy.blockedRetries) outcome.failed(blockedTooLong(map, idx, chunk.retries + 1, byOthers));
    if (done && computed === 0 && summary.reused > 0) this.#deps.reusedOnly();
    // Counted in the rate once, as the chunk ends: its later pass counts the rows this run computed in this one (`own`).
    if (done) feed.computed(map, computed);
    this.#rowFailures(summary);
    feed.tell(map, false);
  }

  /** A sweep of `group` under epoch `attemptSeq` found the chunks `reused` wholly reused: they are done. */
  swept(group: readonly ChunkRecord[], reused: readonly number[], attemptSeq: number): void {
    const { map, store, feed } = this.#deps;
    const wholly = new Set(reused);
    for (const { idx, rows } of group.filter((chunk) => wholly.has(chunk.idx))) {
      store.startChunk(map, idx, attemptSeq);
      store.finishChunk(map, idx, { done: true, completed: rows, failed: 0, reused: rows, blocked: [], failureSamples: [] });
    }
    feed.tell(map, false);
  }

  #rowFailures(summary: ChunkSummary): void {
    if (summary.failed > 0 && this.#deps.failOnRow)
      this.#deps.outcome.rowFailed(summary.failureSamples[0] ?? { key: "?", error: "row failed" });
  }
}
