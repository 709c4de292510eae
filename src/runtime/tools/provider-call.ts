/**
 * One provider request (a single call or one batch), as the engine makes it:
 * it waits for a pacing slot, passes the fault seam, classifies a failure,
 * hands what the answer's headers say about the provider's rate limit to the
 * pacer (and 429s as backpressure), and retries retryable failures in
 * process with escalating delays within the run's retry budget. Every retry
 * and every 429 is counted on the meter.
 */
import { withSendHooks, withSendStop } from "../../core/outbound";
import { ProviderTimeout, ToolCallError } from "../../play/tool-error";
import type { SubrequestMeter } from "../../core/meter";
import type { Pacer } from "../pacing/pacer";
import { AnswerSignals, readRateLimitSignals, saneWaitMs } from "../pacing/signals";
import { messageOf } from "../../core/errors";
import { MAX_JSON_DEPTH, tooDeepAt } from "../../core/json-depth";
import { sleep, type timeoutSignal } from "../../core/time";
import { currentRank } from "../../core/request-rank";
import type { ReceiptError } from "../../contracts/shards";
import type { FaultProbe } from "../../clients/faults";
import { mayRetry, retryDelayMs, type RetryBudget, type RetryClass, type RetryPolicy } from "../../core/backoff";

/**
 * Sends one provider request (a call, a batch, a lookup) under the attempt's stop and its own timeout: not sent at all
 * once `stop` has aborted (a cancel, lost leases, a wind-down), while one already sent is answered; the timeout's clock
 * stops while the request waits for one of the object's six connections, since that wait is not the provider being
 * slow. `send` is given the request's signal (the timeout's). The caller clears the timeout.
 */
export function sendTimed<T>(
  stop: AbortSignal,
  timeout: ReturnType<typeof timeoutSignal>,
  send: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  return withSendStop(stop, () => withSendHooks({ waiting: timeout.pause, sent: timeout.resume }, () => send(timeout.signal)));
}

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
  /** The tool's own reading of a failure as a rate limit (`AnyTool.isRateLimit`). */
  isRateLimit?(error: unknown): boolean;
  /**
   * The provider ignores idempotency keys (and the run does not send unknown outcomes again): a request the
   * provider timeout cut off may have been executed, so it is not sent again here ({@link ProviderOutcome} `unanswered`).
   */
  unkeyed?: boolean;
}

/**
 * A provider request's end: its value, or its classified failure after the retries it deserved. `billed`: the
 * provider answered (and charged) though the call failed; `unanswered`: cut off by the timeout at a provider that
 * ignores idempotency keys (ProviderCallContext.unkeyed), how it ended is unknown.
 */
export type ProviderOutcome<T> =
  | { ok: true; value: T }
  | { ok: false; error: ReceiptError; retryable: boolean; billed?: true; unanswered?: true };

interface Failure {
  error: ReceiptError;
  retryable: boolean;
  retry: RetryClass;
}

/**
 * Classifies what a tool threw: `ToolCallError` says (a rate limit by its
 * code, a 429 status or a wait, its own or its headers' `Retry-After`), and
 * the tool's `isRateLimit` may call any failure a rate limit; anything else
 * is permanent.
 */
export function classifyFailure(error: unknown, isRateLimit?: (error: unknown) => boolean): Failure {
  const known = error instanceof ToolCallError;
  const retryAfterMs = known
    ? (saneWaitMs(error.retryAfterMs) ?? (error.headers ? readRateLimitSignals(error.headers).retryAfterMs : null))
    : null;
  const failure = { error: { code: known ? error.code : "tool_error", message: messageOf(error).slice(0, 8000) } };
  if (toolSaysRateLimit(error, isRateLimit)) return { ...failure, retryable: true, retry: { kind: "rate_limited", retryAfterMs } };
  // A 429 is a rate limit whatever the tool called it (`retryable: res.status >= 500`): else nothing would slow down.
  if (known && (error.code === "rate_limited" || error.status === 429))
    return { ...failure, retryable: true, retry: { kind: "rate_limited", retryAfterMs } };
  if (!known || !error.retryable) return { ...failure, retryable: false, retry: { kind: "permanent" } };
  if (retryAfterMs !== null) return { ...failure, retryable: true, retry: { kind: "rate_limited", retryAfterMs } };
  return { ...failure, retryable: true, retry: { kind: "transient" } };
}

function toolSaysRateLimit(error: unknown, isRateLimit: ((error: unknown) => boolean) | undefined): boolean {
  try {
    return isRateLimit?.(error) === true;
  } catch {
    // A hook that throws cannot say "rate limit": the failure is classified as the error itself says.
    return false;
  }
}

/** The request was stopped (`signal` aborted) before anything of it was sent: its outcome is known, nothing. */
export class NotSent extends Error {
  constructor(readonly reason: unknown) {
    super(messageOf(reason));
  }
}

/**
 * Makes one provider request through `send`, paced and retried. `send`
 * gets the attempt's `reportHeaders` for the tool's call. Throws only when
 * aborted before any of its sends began ({@link NotSent}); aborted after one
 * did, it answers that send's failure (no retry), so the call's outcome is
 * stored as a failure a later attempt may send again, as a retry would have.
 */
export async function callProvider<T>(
  ctx: ProviderCallContext,
  send: (reportHeaders: (headers: HeadersInit) => void) => Promise<T>,
  firstAttempt = 1,
): Promise<ProviderOutcome<T>> {
  let last: Failure | null = null;
  for (let attempt = firstAttempt; ; attempt++) {
    let failure: Failure;
    let sending = false;
    let counted = false;
    try {
      ctx.signal.throwIfAborted();
      const slot = await ctx.pacer.slot(ctx.signal, currentRank());
      const answer = new AnswerSignals();
      try {
        await ctx.faults.check("provider.before", ctx.toolId);
        // Counted as it goes out (after any wait for one of the object's six slots: `call.fetch`); a tool that
        // sends its request some other way (the global fetch) is counted once it answers.
        const count = () => {
          if (counted) return;
          counted = true;
          ctx.meter.provider++;
        };
        // From here it may reach the provider (a tool that sends without `call.fetch` is not seen going out).
        sending = true;
        const value = await withSendHooks({ sent: count }, () => send((headers) => answer.add(headers)));
        count();
        await ctx.faults.check("provider.after", ctx.toolId);
        // Storage (and JSON itself) cannot hold a value nested this deep: the call fails, not the run's receipts.
        const deep = tooDeepAt(value);
        if (deep !== null)
          return {
            ok: false,
            error: {
              code: "output_too_deep",
              message: `${ctx.toolId} answered a value nested past ${MAX_JSON_DEPTH} levels at ${deep.join(".").slice(0, 200)}`,
            },
            retryable: false,
            billed: true,
          };
        return { ok: true, value };
      } catch (error) {
        if (error instanceof ToolCallError && error.headers) answer.add(error.headers);
        throw error;
      } finally {
        slot.release(answer.signals);
      }
    } catch (error) {
      // Stopped before this send began (waiting for a slot, or for the next try): an earlier send's failure is the
      // call's outcome, else nothing was sent.
      // A send that waited for one of the object's six connections is refused with the stop's own reason.
      const refused = sending && error === ctx.signal.reason;
      if (ctx.signal.aborted && (!sending || (refused && !counted))) {
        if (last) return { ok: false, error: last.error, retryable: last.retryable };
        throw new NotSent(ctx.signal.reason);
      }
      // Refused after a request of this send went out (a tool that posts, then polls): how it ended is unknown, and
      // the receipt stays running for whoever takes it over (never a failure of the stop's own making).
      if (ctx.signal.aborted && refused) throw error;
      failure = classifyFailure(error, ctx.isRateLimit);
      if (ctx.unkeyed && error instanceof ProviderTimeout)
        return { ok: false, error: failure.error, retryable: failure.retryable, unanswered: true };
    }
    last = failure;
    // Sent and failed as the attempt stopped: not retried here.
    if (ctx.signal.aborted) return { ok: false, error: failure.error, retryable: failure.retryable };
    const waitMs = await retryWait(ctx, failure.retry, attempt);
    if (waitMs === null) return { ok: false, error: failure.error, retryable: failure.retryable };
    // Stopped while it waits: the next turn answers this failure.
    await sleep(waitMs, ctx.signal).catch(() => {});
  }
}

/**
 * After attempt `attempt` of a request failed as `retry` says: a rate limit
 * slows every caller of the provider (its pacing gate pauses); answers how
 * long to wait before the next attempt, or null when none may follow (a
 * permanent failure, the policy's attempts spent, the run's retry budget
 * spent). A retry allowed is counted on the meter.
 */
export async function retryWait(
  ctx: Pick<ProviderCallContext, "toolId" | "pacer" | "budget" | "retry" | "meter" | "log">,
  retry: RetryClass,
  attempt: number,
  { tellPacer = true }: { tellPacer?: boolean } = {},
): Promise<number | null> {
  if (retry.kind === "rate_limited") {
    ctx.meter.rateLimited++;
    if (tellPacer)
      await ctx.pacer.backpressure(retry.retryAfterMs).catch((error: unknown) => {
        ctx.log(`could not report a 429 of ${ctx.toolId} to the pacing gate: ${messageOf(error)}`);
      });
  }
  if (!mayRetry(ctx.retry, retry, attempt)) return null;
  if (!ctx.budget.take()) {
    if (ctx.budget.noteExhausted())
      ctx.log(`the run's retry budget is spent: retryable provider failures now fail their rows (a rerun retries them)`);
    return null;
  }
  ctx.meter.retries++;
  return retryDelayMs(ctx.retry, attempt, retry.kind === "rate_limited" ? retry.retryAfterMs : null);
}
