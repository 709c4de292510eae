/**
 * The path from `ctx.tool(...)` to a provider, for one chunk attempt:
 * receipt keys (with the tool's auth scope), in-attempt dedupe (one owner,
 * followers share its result), bulk receipt claims, completions and failures
 * per ReceiptShard, the claim dispositions, and the hand-off to the tool
 * queue (batching, waves, pacing, retries). Completions climb the ladder and
 * end in a salvage record when the store stays broken.
 */
import { utf8BytesPast } from "../../core/utf8";
import { AuthScopeChange } from "./auth-scope";
import { LadderExhausted } from "./completion-ladder";
import type { DispatchServices, MapGuards } from "./services";
import { ToolQueue, type HeldOutcome } from "./tool-queue";
import { NotSent } from "./provider-call";
import { priceOf, SpendCapReached } from "./spend";
import { AUTH_SCOPE_CHANGED, ToolCallError } from "../../play/tool-error";
import { NOT_SENT, OUTCOME_UNKNOWN } from "../../stores/receipt-rules";
import type { ToolCallOptions, AnyTool } from "../../play/types";
import { describeIssues, messageOf, TroupeError } from "../../core/errors";
import { sleep } from "../../core/time";
import { withSendHooks } from "../../core/outbound";
import type { AttemptRef, ReceiptError } from "../../contracts/shards";
import type { WorkerBarrier } from "../../core/bulk-queue";
import { idempotencyKey, receiptKey, staleBeforeOf } from "./receipt-keys";
import { type Recovered, recoverCall } from "./recovery";
import { type FailItem, ReceiptWrites } from "./receipt-writes";

/** The invocation's services, the map's guards, and the chunk attempt it schedules for. */
export interface ToolSchedulerOptions {
  services: DispatchServices;
  guards: MapGuards;
  attempt: AttemptRef;
  /** `forceToolRefresh` for the whole run. */
  refresh: boolean;
  /** `retryUnknown` for the whole run: requests whose outcome is unknown may be sent again. */
  retryUnknown: boolean;
  /** The chunk's row workers, so bulk receipt calls go out when every row waits. */
  workers?: WorkerBarrier;
}

/** One call this attempt owns: what it needs to claim, execute and persist it. */
interface OwnedCall {
  key: string;
  tool: AnyTool;
  input: unknown;
  scope: string;
  options: ToolCallOptions;
  /** Results another run finished before this (ms) are stale: `staleAfterSeconds` before the run's start; a refresh's, its start. */
  staleBefore?: number;
  /** Already re-claimed once under a new auth scope. */
  rescoped: boolean;
  /** Tells the tool queue the call will not reach the provider itself (it follows another): see ToolQueue.began. */
  follows(): void;
}

/** Receipt persistence failed: the run must stop (never bill into a broken store). */
export class ReceiptStoreError extends TroupeError {
  constructor(operation: string, cause: unknown) {
    super("receipt_store_failed", `could not ${operation} a tool receipt: ${messageOf(cause)}`, { cause });
  }
}

/**
 * The largest answer, as JSON, a receipt stores: well under SQLite's 2 MB bound on one value once escaped into the
 * receipt's row (a row's data is bounded at 1 MiB too).
 */
export const MAX_RECEIPT_OUTPUT_BYTES = 512 * 1024;

/** One chunk attempt's `ctx.tool` calls; see the module comment. */
export class ToolScheduler {
  #deps: ToolSchedulerOptions;
  #services: DispatchServices;
  /** Each call this attempt owns, by receipt key and what it accepts (see #dedupe). */
  #inflight = new Map<string, Promise<unknown>>();
  /** The last call owned of each receipt key. */
  #lastOf = new Map<string, Promise<unknown>>();
  /** Calls made through {@link call} not settled yet. */
  #unsettled = new Set<Promise<unknown>>();
  /** Claims, completions and failures, one call per shard. */
  #writes: ReceiptWrites;
  #queue: ToolQueue;
  #rescopes: AuthScopeChange;

  constructor(options: ToolSchedulerOptions) {
    this.#deps = options;
    this.#services = options.services;
    this.#writes = new ReceiptWrites({
      services: options.services,
      attempt: options.attempt,
      retryUnknown: options.retryUnknown,
      workers: options.workers,
      busy: (unwritten) => this.#queue.busy && !(this.#queue.windowFull && unwritten > 0),
    });
    this.#queue = new ToolQueue({
      services: this.#services,
      window: options.guards.window,
      workers: options.workers,
      retryUnknown: options.retryUnknown,
      onReadyLow: () => this.#writes.nudge(),
      onWindowFull: () => {
        if (this.#writes.unwritten > 0) this.#writes.nudge();
      },
    });
    this.#rescopes = new AuthScopeChange({ scopes: this.#services.scopes, log: this.#services.log });
  }

  /** Calls a tool durably; identical calls in this attempt share one execution. */
  call(toolId: string, input: unknown, options: ToolCallOptions = {}): Promise<unknown> {
    const ended = this.#queue.began();
    const call = this.#call(toolId, input, options, ended).finally(() => {
      ended();
      this.#unsettled.delete(call);
    });
    this.#unsettled.add(call);
    return call;
  }

  /**
   * Resolves once every call made so far has settled, and every call made
   * meanwhile. A row settles when its fields do, which need not wait for
   * all of its calls (`Promise.all` rejects at its first failure): the
   * attempt waits for the others before it persists and gives its leases
   * up, so none is sent, billed or stored after the attempt ended.
   */
  async settled(): Promise<void> {
    while (this.#unsettled.size > 0) await Promise.allSettled([...this.#unsettled]);
  }

  async #call(toolId: string, input: unknown, options: ToolCallOptions, ended: () => void): Promise<unknown> {
    const tool = this.#services.tools.get(toolId);
    if (!tool) throw new ToolCallError({ code: "unknown_tool", message: `unknown tool ${JSON.stringify(toolId)}`, retryable: false });
    const staleBefore = staleBeforeOf(options.staleAfterSeconds, this.#services.run.createdAt);
    const parsed = tool.input.safeParse(input);
    if (!parsed.success) {
      throw new ToolCallError({
        code: "invalid_tool_input",
        message: `invalid input for ${toolId}: ${describeIssues(parsed.error, { root: "input" })}`,
        retryable: false,
      });
    }
    const scope = await this.#services.scopes.digest(tool);
    const key = await this.#keyOf(tool, parsed.data, scope);
    return this.#dedupe({ key, tool, input: parsed.data, scope, options, staleBefore, rescoped: false, follows: ended });
  }

  #keyOf(tool: AnyTool, input: unknown, scope: string): Promise<string> {
    return receiptKey({ org: this.#services.run.org, toolId: tool.id, toolVersion: tool.version, input, authScope: scope });
  }

  /**
   * Owns the call, or follows its owner in this attempt (and says so to the queue: it will not call the provider).
   * A call of the same receipt that accepts less (another `staleAfterSeconds`, `force`) is claimed once the calls
   * owned before it settled, never beside them (two owners in one attempt would both send it): the receipt then says
   * whether what they found will do for it.
   */
  #dedupe(call: OwnedCall): Promise<unknown> {
    const variant = `${call.key}#${call.options.force === true ? "force" : ""}#${call.staleBefore ?? ""}`;
    const owner = this.#inflight.get(variant);
    const before = this.#lastOf.get(call.key);
    // Following, or waiting for the calls of its receipt before it: not on its way to the provider (until it owns).
    if (owner || before) call.follows();
    if (owner) return this.#park(owner);
    const waited = before && this.#park(before.catch(() => undefined)).then(() => this.#own(call).finally(this.#queue.began()));
    const owned = waited || this.#own(call);
    this.#inflight.set(variant, owned);
    this.#lastOf.set(call.key, owned);
    return owned;
  }

  #fail(shard: number, item: FailItem): Promise<boolean> {
    return this.#writes.fail(shard, item);
  }

  /** A follower or a backoff waits without holding up the chunk's bulk calls. */
  #park<T>(promise: Promise<T>): Promise<T> {
    return this.#deps.workers ? this.#deps.workers.park(promise) : promise;
  }

  #fatal(error: Error): Error {
    this.#deps.guards.latch.trip(error);
    return error;
  }

  /** Claims the receipt and follows its disposition until the call has an outcome. */
  async #own(call: OwnedCall): Promise<unknown> {
    const { policy, signal, receipts } = this.#services;
    const shard = receipts.shardOf(call.key);
    const refresh = this.#deps.refresh || call.options.force === true;
    const staleBefore = refresh ? Math.max(call.staleBefore ?? 0, this.#services.run.createdAt) : call.staleBefore;
    const waitUntil = this.#services.now() + (call.options.receiptWaitMs ?? policy.receiptWaitMs);
    let takeover = false;
    for (let poll = 0; ; poll++) {
      signal.throwIfAborted();
      // Gated before the claim: a call prevented here gets no receipt, so a rerun executes it once.
      this.#deps.guards.latch.guard();
      const claim = await this.#writes
        .claim(shard, refresh, { key: call.key, toolId: call.tool.id, takeover, staleBefore })
        .catch((error: unknown) => {
          throw this.#fatal(new ReceiptStoreError("claim", error));
        });
      takeover = false;
      switch (claim.disposition) {
        case "reused":
          // Completed by this run, maybe by an invocation that died before it recorded the bill: the receipt holds it,
          // so it is this run's spend (billing is idempotent, and a bill already recorded stays one).
          if (claim.finishedByRun === this.#services.run.runId) {
            this.#services.spend.recordBilled({
              requestKey: await idempotencyKey(call.key, claim.generation),
              toolId: call.tool.id,
              provider: call.tool.provider,
              credits: priceOf(call.tool, call.input),
            });
          }
          return claim.output;
        case "failed":
          throw new ToolCallError({ code: claim.error.code, message: claim.error.message, retryable: false });
        case "running": {
          if (await this.#ownerIsDead(claim.owner)) {
            this.#services.log(
              `${call.tool.id}: receipt ${call.key.slice(0, 14)}… was left running by ${claim.owner.runId} (attempt ${claim.owner.attemptSeq}), which can no longer finish it; taking it over`,
              "receipt_taken_over",
            );
            takeover = true;
            continue;
          }
          const left = waitUntil - this.#services.now();
          // Waited for until it finishes, dies, or its lease lapses (then the receipt is this call's to claim): an owner
          // of this run (another of its chunks or maps: taken over, it lost the receipt and its whole chunk ran again),
          // and any live owner of a call to a provider that ignores idempotency keys (both would send it).
          const backoffMs = 50 * 2 ** Math.min(poll, 4);
          if (left <= 0 && (call.tool.idempotent === false || claim.owner.runId === this.#services.run.runId)) {
            await this.#park(sleep(backoffMs, signal));
            continue;
          }
          if (left <= 0) {
            this.#services.log(
              `${call.tool.id}: receipt ${call.key.slice(0, 14)}… is still running in ${claim.owner.runId} after the call's receipt wait; taking it over`,
              "receipt_taken_over",
            );
            takeover = true;
            continue;
          }
          await this.#park(sleep(Math.min(left, backoffMs), signal));
          continue;
        }
        case "claimed":
          if (claim.unknownOutcome && !this.#deps.retryUnknown && call.tool.idempotent === false && !call.tool.recover)
            return this.#unknownOutcome(call, shard);
          return this.#execute(call, shard, claim.generation, claim.takeover === true, claim.unknownOutcome === true);
      }
    }
  }

  async #ownerIsDead(owner: AttemptRef): Promise<boolean> {
    try {
      return await this.#services.owners.isDead(owner);
    } catch (error) {
      // Unknown is treated as alive: waiting (bounded by receiptWaitMs) is safe, a takeover might double-call.
      this.#services.log(`could not check whether run ${owner.runId} is alive (${messageOf(error)}); waiting for its receipt`);
      return false;
    }
  }

  /**
   * The request this receipt was claimed for may have reached a provider that
   * ignores idempotency keys, and nothing says how it ended: sending it again
   * could execute (and bill) it twice. The receipt and the row fail
   * `outcome_unknown`; a rerun sends it again only with `retryUnknown`.
   */
  async #unknownOutcome(
    call: OwnedCall,
    shard: number,
    why = "an earlier attempt may have sent this request and did not say how it ended",
  ): Promise<never> {
    const error = {
      code: OUTCOME_UNKNOWN,
      message: `${call.tool.id}: ${why}; its provider ignores idempotency keys, so it was not sent again (rerun with retryUnknown: true to send it)`,
    };
    await this.#fail(shard, { key: call.key, error, retryable: false }).catch((failure: unknown) => {
      throw this.#fatal(new ReceiptStoreError("fail", failure));
    });
    this.#services.meter.outcomeUnknown++;
    throw new ToolCallError({ ...error, retryable: false });
  }

  async #execute(call: OwnedCall, shard: number, generation: number, takeover = false, unknownOutcome = false): Promise<unknown> {
    const key = await idempotencyKey(call.key, generation);
    // Reserved before anything can bill; a request the cap refuses is never sent.
    await this.#reserve(call, key, shard, unknownOutcome);
    let billed = false;
    let unknown = unknownOutcome;
    try {
      if (takeover) {
        // The attempt this receipt was taken from may have been billed before it died: ask before calling again.
        const recovered = await this.#recover(call, key);
        if (recovered.found) {
          billed = await this.#complete(call, shard, key, recovered.output);
          return recovered.output;
        }
        // The lookup failed, or the request is still being answered: sent again, a provider that ignores
        // idempotency keys would execute it twice.
        if (!recovered.known && unknownOutcome && !this.#deps.retryUnknown && call.tool.idempotent === false)
          return await this.#unknownOutcome(call, shard);
        // The provider never got it: a send cut off now leaves the receipt `not_sent`, and the next claim asks no more.
        if (recovered.known) {
          unknown = false;
          this.#services.learned?.();
        }
      }
      try {
        return await this.#send(call, shard, key, unknown, (accepted) => (billed = accepted));
      } catch (error) {
        if (!(error instanceof Unanswered)) throw error;
        // Cut off by the timeout at a provider that ignores idempotency keys: it may have executed the request, so
        // it is asked, not sent again. Never got: a failure like the timeout, sent again by a rerun.
        const recovered = await this.#recover(call, key);
        if (recovered.found) {
          billed = await this.#complete(call, shard, key, recovered.output);
          return recovered.output;
        }
        if (!recovered.known) return await this.#unknownOutcome(call, shard, `${error.message}, and nothing says how it ended`);
        await this.#fail(shard, { key: call.key, error: error.failure, retryable: true }).catch((failure: unknown) => {
          throw this.#fatal(new ReceiptStoreError("fail", failure));
        });
        throw new ToolCallError({ ...error.failure, retryable: true });
      }
    } finally {
      if (billed) this.#services.spend.bill(key);
      else this.#services.spend.release(key);
    }
  }

  /** What the provider says of this call's request: its answer, that it never got it, or nothing sure (recovery.ts). */
  #recover(call: OwnedCall, key: string): Promise<Recovered> {
    const waitMs = call.options.receiptWaitMs ?? this.#services.policy.receiptWaitMs;
    const { tool, input, scope } = call;
    return this.#park(recoverCall({ tool, input, idempotencyKey: key, authScopeDigest: scope, waitMs }, this.#services));
  }

  /**
   * Reserves the request's price. Refused (the cap, or a price the tool
   * cannot give): the receipt goes back, retryable so a rerun claims it, and
   * over the cap the map stops sending. A receipt taken over whose earlier
   * request may have been executed (`unknown`) is left as it is: its run's
   * teardown releases it, and the next claim still finds its outcome unknown.
   */
  async #reserve(call: OwnedCall, requestKey: string, shard: number, unknown: boolean): Promise<void> {
    let refusal: SpendCapReached | ToolCallError;
    try {
      await this.#services.spend.reserve(
        {
          requestKey,
          toolId: call.tool.id,
          provider: call.tool.provider,
          credits: priceOf(call.tool, call.input),
        },
        this.#services.signal,
      );
      return;
    } catch (error) {
      if (!(error instanceof SpendCapReached || error instanceof ToolCallError)) {
        // Stopped while it waited for a grant: never sent, and a rerun may send it (not a request of unknown outcome).
        const message = `${call.tool.id}: the request was not sent (${messageOf(error)})`;
        if (!unknown) await this.#fail(shard, { key: call.key, error: { code: NOT_SENT, message }, retryable: true }).catch(() => false);
        throw error;
      }
      refusal = error;
    }
    if (!unknown)
      await this.#fail(shard, { key: call.key, error: { code: refusal.code, message: refusal.message }, retryable: true }).catch(
        (error: unknown) => {
          throw this.#fatal(new ReceiptStoreError("fail", error));
        },
      );
    throw refusal instanceof SpendCapReached ? this.#fatal(refusal) : refusal;
  }

  /**
   * Sends the request; `onBilled` hears whether a billed answer was stored in the receipt. `unknown`: an earlier
   * request of the receipt may have been executed, so a send cut off before it left does not make it `not_sent`.
   */
  async #send(call: OwnedCall, shard: number, key: string, unknown: boolean, onBilled: (accepted: boolean) => void): Promise<unknown> {
    let wentOut = false;
    let held: HeldOutcome;
    try {
      held = await this.#park(
        withSendHooks(
          {
            sent: () => {
              wentOut = true;
            },
          },
          () => this.#queue.submit(call.tool, { input: call.input, idempotencyKey: key, authScopeDigest: call.scope }),
        ),
      );
    } catch (caught) {
      // Cut off before any request of it left (a cancel, lost leases, a wind-down): the receipt says it was never sent,
      // so a rerun sends it as a call never made, not as one whose outcome is unknown (which a provider that ignores
      // idempotency keys cannot be sent again). A batch's request leaves from its gathering, out of this call's sight:
      // told when the batch was refused before it could leave.
      const notSent = caught instanceof NotSent;
      const error = notSent ? caught.reason : caught;
      if ((notSent || (!wentOut && !call.tool.batch)) && this.#services.signal.aborted && !unknown) {
        const message = `${call.tool.id}: the request was not sent (${messageOf(error)})`;
        await this.#fail(shard, { key: call.key, error: { code: NOT_SENT, message }, retryable: true }).catch(() => false);
      }
      throw error;
    }
    const { outcome } = held;
    try {
      if (outcome.ok) {
        // Billed by the provider; counted here only if this attempt's receipt holds it (else a newer attempt's does).
        onBilled(await this.#complete(call, shard, key, outcome.output));
        return outcome.output;
      }
      // The receipt stays running while the provider is asked (#execute).
      if (outcome.unanswered) throw new Unanswered(outcome.error);
      const rescope = outcome.error.code === AUTH_SCOPE_CHANGED && !call.rescoped;
      const took = await this.#fail(shard, { key: call.key, error: outcome.error, retryable: outcome.retryable || rescope }).catch(
        (error: unknown) => {
          throw this.#fatal(new ReceiptStoreError("fail", error));
        },
      );
      // A failure the provider charged for (an answer too deep to store): counted as the receipt that holds it is.
      if (outcome.billed) onBilled(took);
      if (!rescope) throw new ToolCallError({ ...outcome.error, retryable: outcome.retryable });
    } finally {
      held.done();
    }
    const next = await this.#rescopes.rescope(call.tool, call.scope, outcome.error);
    return this.#dedupe({ ...call, key: await this.#keyOf(call.tool, call.input, next), scope: next, rescoped: true });
  }

  /**
   * Completes the receipt, climbing the ladder; salvages the output when the
   * store stays broken. True when this attempt's receipt (or salvage) holds it.
   */
  async #complete(call: OwnedCall, shard: number, requestKey: string, output: unknown): Promise<boolean> {
    const { signal } = this.#services;
    const json = JSON.stringify(output) ?? "null";
    const bytes = utf8BytesPast(json, MAX_RECEIPT_OUTPUT_BYTES);
    if (bytes !== null) {
      // Billed, but no receipt can hold it (nor a row): the receipt fails for good, so a rerun does not pay again.
      const error = {
        code: "output_too_large",
        message: `${call.tool.id}: the provider's answer is ${bytes} bytes of JSON; a stored result holds at most ${MAX_RECEIPT_OUTPUT_BYTES}`,
      };
      const took = await this.#fail(shard, { key: call.key, error, retryable: false }).catch((failure: unknown) => {
        throw this.#fatal(new ReceiptStoreError("fail", failure));
      });
      // Counted against the run whose receipt holds it (one that took the receipt over answered the same).
      if (took) this.#services.spend.bill(requestKey);
      throw new ToolCallError({ ...error, retryable: false });
    }
    let accepted: boolean;
    try {
      accepted = await this.#deps.guards.ladder.run({
        attempt: () => this.#writes.complete(shard, { key: call.key, output }, json.length),
        // The first failure trips the latch: nothing new is billed into a store that may be broken.
        onFailure: (error) => this.#deps.guards.latch.trip(new ReceiptStoreError("complete", error)),
        sleep: (ms) => this.#park(sleep(ms, signal)),
        signal,
      });
    } catch (error) {
      const attempts = error instanceof LadderExhausted ? error.attempts : 1;
      const cause = error instanceof LadderExhausted ? error.last : error;
      this.#services.salvage({
        receiptKey: call.key,
        toolId: call.tool.id,
        attempt: this.#deps.attempt,
        output,
        completeAttempts: attempts,
        error: messageOf(cause),
        at: this.#services.now(),
      });
      // Billed and kept in salvage: it is this run's spend.
      this.#services.spend.bill(requestKey);
      throw this.#fatal(new ReceiptStoreError("complete", cause));
    }
    if (!accepted)
      this.#services.log(
        `receipt ${call.key.slice(0, 14)}… for ${call.tool.id} was taken over by a newer attempt; its result is kept there`,
      );
    return accepted;
  }
}

/** A request cut off by the provider timeout at a provider that ignores idempotency keys (ProviderOutcome.unanswered). */
class Unanswered extends Error {
  constructor(readonly failure: ReceiptError) {
    super(failure.message);
  }
}
