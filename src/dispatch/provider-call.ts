/**
 * One provider request (a single call or one batch), as the engine makes it:
 * it waits for a pacing slot, passes the fault seam, classifies a failure,
 * reports 429s to the pacing gate, and retries retryable failures in process
 * with escalating delays within the run's retry budget. Every retry and
 * every 429 is counted on the meter.
 */
import { ToolCallError } from "../play/tool-error";
import type { SubrequestMeter } from "../engine/shard-clients";
import type { Pacer } from "../pacing/pacer";
import { messageOf } from "../shared/errors";
import { MAX_JSON_DEPTH, tooDeepAt } from "../shared/json-depth";
import { sleep } from "../shared/time";
import type { ReceiptError } from "../storage/contracts";
import type { FaultProbe } from "../testing/faults";
import { mayRetry, retryDelayMs, type RetryBudget, type RetryClass, type RetryPolicy } from "./backoff";

/** The pause reported to the gate for a 429 that gave no Retry-After. */
export const DEFAULT_BACKPRESSURE_MS = 1000;

/** What one provider request needs: its tool's pacer, the run's budget, the fault seam, the retry policy. */
export interface ProviderCallContext {
  toolId: string;
  pacer: Pacer;
  budget: RetryBudget;
  faults: FaultProbe;
  retry: RetryPolicy;
  signal: AbortSignal;
  meter: SubrequestMeter;
  log(line: string): void;
}

/** A provider request's end: its value, or its classified failure after the retries it deserved. */
export type ProviderOutcome<T> = { ok: true; value: T } | { ok: false; error: ReceiptError; retryable: boolean };

interface Failure {
  error: ReceiptError;
  retryable: boolean;
  retry: RetryClass;
}

/** Classifies what a tool threw: `ToolCallError` says; anything else is permanent. */
export function classifyFailure(error: unknown): Failure {
  if (!(error instanceof ToolCallError)) return { error: { code: "tool_error", message: messageOf(error).slice(0, 8000) }, retryable: false, retry: { kind: "permanent" } };
  const failure = { error: { code: error.code, message: error.message.slice(0, 8000) }, retryable: error.retryable };
  if (!error.retryable) return { ...failure, retry: { kind: "permanent" } };
  if (error.code === "rate_limited" || error.retryAfterMs !== null) return { ...failure, retry: { kind: "rate_limited", retryAfterMs: error.retryAfterMs } };
  return { ...failure, retry: { kind: "transient" } };
}

/** Makes one provider request through `send`, paced and retried. Throws only when aborted. */
export async function callProvider<T>(ctx: ProviderCallContext, send: () => Promise<T>): Promise<ProviderOutcome<T>> {
  for (let attempt = 1; ; attempt++) {
    ctx.signal.throwIfAborted();
    let failure: Failure;
    try {
      const slot = await ctx.pacer.slot(ctx.signal);
      try {
        await ctx.faults.check("provider.before", ctx.toolId);
        ctx.meter.provider++;
        const value = await send();
        await ctx.faults.check("provider.after", ctx.toolId);
        // Storage (and JSON itself) cannot hold a value nested this deep: the call fails, not the run's receipts.
        const deep = tooDeepAt(value);
        if (deep !== null) return { ok: false, error: { code: "output_too_deep", message: `${ctx.toolId} answered a value nested past ${MAX_JSON_DEPTH} levels at ${deep.join(".").slice(0, 200)}` }, retryable: false };
        return { ok: true, value };
      } finally {
        slot.release();
      }
    } catch (error) {
      // Not sent (waiting for a slot when cancelled), or sent and failed: either way nothing billed is dropped.
      if (ctx.signal.aborted) throw ctx.signal.reason;
      failure = classifyFailure(error);
    }
    if (failure.retry.kind === "rate_limited") {
      ctx.meter.rateLimited++;
      await ctx.pacer.backpressure(failure.retry.retryAfterMs ?? DEFAULT_BACKPRESSURE_MS).catch((error: unknown) => {
        ctx.log(`could not report a 429 of ${ctx.toolId} to the pacing gate: ${messageOf(error)}`);
      });
    }
    if (!mayRetry(ctx.retry, failure.retry, attempt)) return { ok: false, error: failure.error, retryable: failure.retryable };
    if (!ctx.budget.take()) {
      if (ctx.budget.noteExhausted()) ctx.log(`the run's retry budget is spent: retryable provider failures now fail their rows (a rerun retries them)`);
      return { ok: false, error: failure.error, retryable: failure.retryable };
    }
    ctx.meter.retries++;
    const retryAfterMs = failure.retry.kind === "rate_limited" ? failure.retry.retryAfterMs : null;
    await sleep(retryDelayMs(ctx.retry, attempt, retryAfterMs), ctx.signal);
  }
}
