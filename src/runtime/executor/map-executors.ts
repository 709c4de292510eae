/**
 * A map's executors as its coordinator's invocation drives them: the sizer
 * (how many the map's providers need, leased under the org's bound) and the
 * remote chunk executor that hands attempts and sweeps to them. Each report
 * feeds the sizer, then `onReport` (progress, and growing the pool).
 */
import { ExecutorClient } from "../../clients/executors";
import { OrgClient } from "../../clients/orgs";
import { pacingGate } from "../../clients/pacing-gates";
import type { AssignedDataset, AttemptReport } from "../../contracts/executors";
import type { FatalLatch } from "../../core/latch";
import type { RunStore } from "../../stores/run-store";
import type { InvocationScope } from "../invocation/scope";
import type { ExecutorAttempts } from "./executor-attempts";
import { RemoteChunkExecutor } from "./remote-executor";
import { ExecutorSizer } from "./sizing";

/** How long a map's lease of executors under its org's bound lasts unless renewed (every few seconds while it runs). */
const EXECUTOR_LEASE_MS = 30_000;

export interface MapExecutors {
  executor: RemoteChunkExecutor;
  sizer: ExecutorSizer;
}

/** The map's executors, sized from its providers; null when chunk attempts run in the coordinator (`maxExecutors: 0`). */
export function mapExecutors(options: {
  scope: InvocationScope;
  /** The coordinator's executors' reports; null runs every attempt in the coordinator. */
  attempts: ExecutorAttempts | null;
  store: RunStore;
  dataset: AssignedDataset;
  latch: FatalLatch;
  /** The most executors the map can use now (SizingOptions.demand). */
  demand(): number;
  /** The invocation nears its limits: the attempts still running in executors wind down (RemoteExecutorOptions). */
  windDown: AbortSignal;
  onReport(): void;
  /** An executor became busy (1) or idle (-1). */
  onSlot(delta: 1 | -1): void;
}): MapExecutors | null {
  const { scope, attempts, store, dataset, latch, demand, windDown, onReport, onSlot } = options;
  const { env, run, policy, meter, signal, now } = scope;
  if (!attempts || policy.maxExecutors === 0) return null;
  // The executors busy now go with each lease (the executor is made after the sizer, which leases first).
  let busy = () => 0;
  const sizer = new ExecutorSizer({
    min: Math.min(policy.minExecutors, policy.maxExecutors),
    max: policy.maxExecutors,
    demand,
    now,
    pace: async (provider) => {
      const { policy: pacing, state } = await pacingGate(env, run.org, provider, meter, "state").state(provider);
      return {
        requestsPerSecond: pacing.requestsPerSecond ?? state.effectiveRequestsPerSecond,
        concurrency: pacing.concurrency,
        bookedForMs: state.bookedForMs,
      };
    },
    // Async: past the emulated subrequest cap the meter throws, and the sizer takes a failed lease as a rejection.
    lease: async (wanted) => {
      meter.countRpc("org.leaseExecutors");
      return new OrgClient({ env, org: run.org }).leaseExecutors({
        runId: run.runId,
        map: dataset.dataset,
        wanted,
        busy: busy(),
        limit: policy.maxExecutorsPerOrg,
        ttlMs: EXECUTOR_LEASE_MS,
      });
    },
    // The first latency's sizing (a refresh in the background) widens the map at once, not at the next report.
    onResized: onReport,
  });
  const executor = new RemoteChunkExecutor({
    runId: run.runId,
    dataset,
    client: new ExecutorClient({ env, meter }),
    attempts,
    latch,
    signal,
    windDown,
    // Its leases have lapsed by then; but a report may be late on a loaded machine, and an end heard is better than a guess.
    silenceMs: Math.max(policy.rowLeaseTtlMs, 5_000),
    stopWaitMs: policy.executorStopWaitMs,
    recompute: run.force || run.forceToolRefresh,
    addUsage: (usage) => store.addUsage(usage),
    observe: (report) => {
      const providers = [...report.bills, ...report.latency, ...report.waiting].map((seen) => seen.provider);
      sizer.observe(providers, latencyOf(report), Math.max(0, ...report.waiting.map((w) => w.oldestMs)));
      onReport();
    },
    target: () => sizer.target(),
    sizing: () => sizer.sizing,
    onSlot,
    now,
  });
  busy = () => executor.busy;
  return { executor, sizer };
}

/** A report's provider latency over all its providers (the sizer sizes by one latency), or null without any. */
function latencyOf(report: AttemptReport): { calls: number; totalMs: number } | null {
  let calls = 0;
  let totalMs = 0;
  for (const seen of report.latency) {
    calls += seen.calls;
    totalMs += seen.totalMs;
  }
  return calls > 0 ? { calls, totalMs } : null;
}
