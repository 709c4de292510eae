/**
 * Recovery of a taken-over call. When an attempt claims a receipt that another
 * attempt had claimed and never completed (`takeover` on the claim), that
 * attempt may have died after its request reached the provider: billed, with
 * the answer lost. Asking the provider first (`AnyTool.recover`, which
 * neither bills nor counts) stores that answer instead of sending the call a
 * second time. A request with the key still being answered is waited for,
 * within the call's receipt wait.
 *
 * A lookup is a provider request, paced like a call by the provider's rate,
 * but it takes a slot of the rate alone (`Pacer.rateSlot`): it is what an
 * attempt must learn before it may go on, so it is served before the
 * attempt's calls waiting and needs none of the concurrency units its calls
 * hold (waiting behind them made attempts with short invocations lose every
 * lookup to their wind-down). While the request is still being answered it is
 * asked again no sooner than the provider's calls take to be answered, for up
 * to the receipt wait from the first answer that said so: time spent getting
 * an answer (a slot, 429s waited out) is not time the request was waited for. What
 * its answer says of the provider's limit reaches the gate as a call's does.
 * A lookup that failed says nothing of how the request ended, and asking
 * again bills nothing, so a failure a call would retry is asked again within
 * the run's retry budget: one answered as a rate limit (a 429, or what the
 * tool's `isRateLimit` says is one) slows every caller and waits as a call's
 * would, within the call's rate-limit attempts; one the tool throws as
 * retryable (a 5xx) after the calls' backoff, within their attempts.
 * Anything else (a permanent failure, an error that is not a
 * `ToolCallError`) ends the lookup: nothing sure. The attempt stopping
 * before the lookup is sent ends it with the stop's reason, which says
 * nothing of the request; a lookup already sent is answered, as a call in
 * flight is, and what it says is kept.
 */
import type { AnyTool } from "../../play/types";
import { codeOf, messageOf } from "../../core/errors";
import { sleep, timeoutSignal } from "../../core/time";
import { outboundFetch, withSendHooks } from "../../core/outbound";
import { toolEnv } from "../../play/define";
import { ProviderTimeout, ToolCallError } from "../../play/tool-error";
import { currentRank } from "../../core/request-rank";
import type { Pacer, PacerSlot } from "../pacing/pacer";
import { AnswerSignals } from "../pacing/signals";
import { classifyFailure, retryWait, sendTimed } from "./provider-call";
import type { DispatchServices } from "./services";

/** The call to recover: its tool and input, its keys, and how long to wait for a request with its key still in flight. */
export interface RecoverCallOptions {
  tool: AnyTool;
  input: unknown;
  idempotencyKey: string;
  authScopeDigest: string;
  waitMs: number;
}

/** What a recovery uses of the invocation: its provider's pacer, the run's retry budget and policy, the clock and the log. */
export type RecoveryServices = Pick<
  DispatchServices,
  "env" | "signal" | "meter" | "policy" | "pacers" | "budget" | "faults" | "now" | "log"
>;

/** Waits between lookups of a request still being answered, or the provider's call time if longer. */
const POLL_MS = [25, 50, 100, 200, 400];

/** Recoveries per invocation (keyed by its log function), so the ledger gets a line at 1, 10, 100… not one per call. */
const recoveries = new WeakMap<object, number>();

/**
 * What the provider says of the dead attempt's request: its answer
 * (`found`); that it never got it (`known`: the call may go out again); or
 * nothing sure (`known: false`: the tool cannot tell, the lookup failed, or
 * the request was still being answered when the wait ran out). The caller
 * decides what nothing sure allows: a provider that honours idempotency keys
 * replays a call sent again with the same key; one that ignores them would
 * execute and bill it twice.
 */
export type Recovered = { found: true; output: unknown } | { found: false; known: boolean };

export async function recoverCall(o: RecoverCallOptions, services: RecoveryServices): Promise<Recovered> {
  const recover = o.tool.recover;
  if (!recover) return { found: false, known: false };
  const { signal, meter, now, log } = services;
  const pacer = services.pacers.for(o.tool.provider);
  let until: number | null = null;
  for (let poll = 0, attempt = 1; ; poll++) {
    signal.throwIfAborted();
    const heard = new AnswerSignals();
    let slot: PacerSlot | null = null;
    let answer: Awaited<ReturnType<typeof recover>>;
    // Counted as it goes out, as a call is (after any wait for one of the object's six connections): counted while
    // they waited, a chunk's lookups after a takeover spent a short invocation's budget before the first was answered.
    let counted = false;
    const count = () => {
      if (counted) return;
      counted = true;
      meter.lookups++;
    };
    try {
      // A slot refused (the gate unreachable) is a lookup that failed: asked again as one.
      slot = await pacer.rateSlot(signal, currentRank());
      await services.faults.check("provider.lookup", o.tool.id);
      // Not sent once the attempt stops (a cancel, lost leases, a wind-down); one sent is answered, as a call in
      // flight is, so that what it learnt is stored (a wound-down attempt's next invocation need not ask again). Only
      // its timeout stops it, a call's, whose clock stops while it waits for one of the object's six connections.
      const timeout = timeoutSignal(
        services.policy.providerTimeoutMs,
        () => new ProviderTimeout(`${o.tool.id}: the lookup was not answered in time`),
      );
      try {
        answer = await withSendHooks({ sent: count }, () =>
          sendTimed(signal, timeout, (requestSignal) =>
            recover(o.idempotencyKey, {
              idempotencyKey: o.idempotencyKey,
              signal: requestSignal,
              env: toolEnv(o.tool, services.env),
              authScopeDigest: o.authScopeDigest,
              input: o.input,
              fetch: outboundFetch(requestSignal),
              reportHeaders: (headers) => heard.add(headers),
            }),
          ),
        );
      } finally {
        timeout.clear();
      }
      // A tool that asks some other way than `call.fetch` is counted once it answers.
      count();
    } catch (error) {
      if (error instanceof ToolCallError && error.headers) heard.add(error.headers);
      slot?.release(heard.signals);
      // Past the invocation's subrequest cap: the invocation's error, not the lookup's.
      if (codeOf(error) === "too_many_subrequests") throw error;
      // Stopped before it was sent (a cancel, lost leases, a wind-down): the attempt stops, having learnt nothing, and
      // the receipt goes to the next taker, which asks again. Answered "nothing sure", the caller would fail it
      // outcome_unknown for good (a provider that ignores idempotency keys), though the provider knows.
      if (!signal.aborted && (await mayAskAgain(o.tool, { pacer, error, attempt }, services))) {
        attempt++;
        continue;
      }
      if (signal.aborted) throw signal.reason;
      log(`${o.tool.id}: could not ask the provider for the result of a taken-over call (${messageOf(error)})`);
      return { found: false, known: false };
    }
    slot.release(heard.signals);
    if (answer.found) {
      const count = (recoveries.get(log) ?? 0) + 1;
      recoveries.set(log, count);
      if (Number.isInteger(Math.log10(count))) {
        log(
          `${o.tool.id}: recovered the provider's result of a call taken over from a dead attempt instead of calling it again (${count} in this invocation so far)`,
          "call_recovered",
        );
      }
      return { found: true, output: answer.output };
    }
    if (!answer.inFlight) return { found: false, known: true };
    until ??= now() + o.waitMs;
    const left = until - now();
    if (left <= 0) return { found: false, known: false };
    // Asked sooner than the provider answers a call, a lookup would find it still in flight: a slot spent for nothing.
    const pollMs = Math.max(POLL_MS[Math.min(poll, POLL_MS.length - 1)]!, pacer.callMs ?? 0);
    await sleep(Math.min(left, pollMs), signal);
  }
}

/**
 * A lookup that failed: a rate limit slows every caller of the provider and
 * waits as a call's 429 would; a failure the tool calls retryable may be asked
 * again after the calls' backoff, if the retry policy and the run's budget
 * allow (a lookup neither bills nor counts: only its answer matters).
 */
async function mayAskAgain(
  tool: AnyTool,
  { pacer, error, attempt }: { pacer: Pacer; error: unknown; attempt: number },
  { signal, meter, policy, budget, log }: RecoveryServices,
): Promise<boolean> {
  // Stopped (a cancel, lost leases, a wind-down): the lookup is not asked again, and nothing is counted.
  if (signal.aborted) return false;
  const failure = classifyFailure(error, (e) => tool.isRateLimit?.(e) === true);
  const waitMs = await retryWait({ toolId: tool.id, pacer, budget, retry: policy, meter, log }, failure.retry, attempt);
  if (waitMs === null || signal.aborted) return false;
  await sleep(waitMs, signal);
  return true;
}
