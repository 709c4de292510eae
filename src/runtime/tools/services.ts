/**
 * What tool dispatch needs, in two lifetimes: per invocation of a run
 * (`DispatchServices`, shared by every scheduler the invocation makes) and
 * per map (`MapGuards`, shared by every chunk of one map, so its circuit
 * breaker and waves are map-wide).
 */
import { FatalLatch } from "../../core/latch";
import type { RuntimePolicy } from "../../core/policy";
import { RunClient } from "../../clients/runs";
import { ReceiptClient } from "../../clients/shards";
import type { InvocationScope } from "../invocation/scope";
import { PacerRegistry } from "../pacing/pacers";
import type { AnyTool } from "../../play/types";
import { AuthScopes } from "./auth-scope";
import { RetryBudget } from "../../core/backoff";
import type { SalvageEntry } from "../../contracts/shards";
import { CompletionLadder } from "./completion-ladder";
import { DispatchWindow } from "./dispatch-window";
import { OwnerLiveness } from "./owner-liveness";
import type { SpendLedger } from "./spend";

/**
 * Per invocation of a run: what the invocation shares (its scope), and what
 * tool dispatch adds to it, built once and shared by every scheduler the
 * invocation makes. An attempt's view replaces `signal` and `receipts` with
 * its leases' (attempt-leases.ts).
 */
export interface DispatchServices extends InvocationScope {
  tools: ReadonlyMap<string, AnyTool>;
  receipts: ReceiptClient;
  pacers: PacerRegistry;
  budget: RetryBudget;
  scopes: AuthScopes;
  owners: OwnerLiveness;
  /** Keeps a billed output whose receipt could not be completed (durably, before it returns). */
  salvage(entry: SalvageEntry): void;
  /** The run's billable requests: reserved before they are sent, then billed or released. */
  spend: SpendLedger;
  /**
   * A provider request of `provider` leaves now; the function it returns is called when the request ends, `timed`
   * unless it is sent again. An executor reports the time between (the latency) and, before any answer, the age of
   * the oldest request: both size the map's executors.
   */
  observeRequest(provider: string): (timed: boolean) => void;
  /** A lookup learned that the provider never received a taken-over call's request (a chunk attempt's progress). */
  learned?(): void;
}

/** Per map: one latch, one dispatch window and one completion ladder for all its chunks. */
export interface MapGuards {
  latch: FatalLatch;
  window: DispatchWindow;
  ladder: CompletionLadder;
}

/** What the invocation's dispatch adds to its scope. */
export interface DispatchParts {
  tools: ReadonlyMap<string, AnyTool>;
  salvage(entry: SalvageEntry): void;
  spend: SpendLedger;
  observeRequest?(provider: string): (timed: boolean) => void;
  /** The pacers to use, when several attempts of one invocation share its connections (an executor's); else new ones. */
  pacers?: PacerRegistry;
  /** The coordinator's invocation of the run: the id of its play-level attempts (see OwnerLiveness). */
  invocation?: string;
}

/** The services of one invocation of a run. Call `pacers.closeAll()` when the invocation ends (unless `parts.pacers` are another's). */
export function createDispatchServices(scope: InvocationScope, parts: DispatchParts): DispatchServices {
  const { env, run, policy, meter, faults, now, log } = scope;
  const runs = new RunClient({ env, org: run.org, meter });
  return {
    env,
    run,
    policy,
    signal: scope.signal,
    meter,
    faults,
    emit: scope.emit,
    log,
    now,
    tools: parts.tools,
    salvage: parts.salvage,
    spend: parts.spend,
    observeRequest: parts.observeRequest ?? (() => () => {}),
    receipts: new ReceiptClient({ env, org: run.org, shardCount: policy.receiptShards, meter, faults }),
    pacers: parts.pacers ?? new PacerRegistry({ env, org: run.org, caller: `${run.runId}/${crypto.randomUUID()}`, meter, log, now }),
    budget: new RetryBudget({ remaining: policy.runRetryBudget - run.usage.providerRetries }),
    scopes: new AuthScopes({ env }),
    owners: new OwnerLiveness({
      runId: run.runId,
      invocation: parts.invocation,
      now,
      lookup: async (runId) => {
        const view = await runs.getRun(runId);
        return view ? { status: view.status, runAttempt: view.runAttempt } : null;
      },
    }),
  };
}

/** Fresh map-wide guards: a latch, its dispatch window, and the completion ladder. */
export function createMapGuards(options: { policy: RuntimePolicy; deadlineAt: number; now(): number }): MapGuards {
  const latch = new FatalLatch();
  return {
    latch,
    window: new DispatchWindow({ size: options.policy.dispatchWaveSize, latch }),
    ladder: new CompletionLadder({ delaysMs: options.policy.completionRetryDelaysMs, deadlineAt: options.deadlineAt, now: options.now }),
  };
}
