/**
 * Where a chunk's owned calls wait for the provider. Calls of a batchable tool
 * gather for a short grace window, and past it for as long as other calls of
 * the attempt are still on their way (each may join when it returns; bounded
 * by `batchHoldMs`), or until a full batch is waiting; they are cut into
 * batches and go out as batch requests, at most the provider's
 * `batchParallelism` at once; other calls go out one by one. Every request
 * first enters the map's dispatch window (bounded waves; the latch is read
 * there) and then takes a pacing slot.
 *
 * Each caller gets its outcome together with its place in the window:
 * `done()` gives the place back once the receipt is written.
 */
import { outboundFetch, withSendHooks } from "../../core/outbound";
import { sleep, timeoutSignal } from "../../core/time";
import type { BatchMember, AnyTool } from "../../play/types";
import { messageOf } from "../../core/errors";
import type { WorkerBarrier } from "../../core/bulk-queue";
import { checkSplit, planBatches } from "./batching";
import {
  callProvider,
  classifyFailure,
  NotSent,
  type ProviderCallContext,
  type ProviderOutcome,
  retryWait,
  sendTimed,
} from "./provider-call";
import { ProviderTimeout, ToolCallError } from "../../play/tool-error";
import type { RetryClass } from "../../core/backoff";
import type { DispatchServices } from "./services";
import type { DispatchWindow } from "./dispatch-window";
import { getOrInsert } from "../../core/collections";
import { BatchLanes } from "./batch-lanes";
import { toolEnv } from "../../play/define";
import { MAX_OUTBOUND_IN_FLIGHT } from "../../core/platform-limits";

/** One owned call, ready to send: its validated input and keys. */

export interface QueuedCall {
  input: unknown;
  idempotencyKey: string;
  authScopeDigest: string;
}

/** How a call ended at the provider (after its in-process retries). */
export type CallOutcome = { ok: true; output: unknown } | Extract<ProviderOutcome<unknown>, { ok: false }>;

/** An outcome still holding its place in the dispatch window. */
export interface HeldOutcome {
  outcome: CallOutcome;
  /** The receipt is written: free the place (idempotent). */
  done(): void;
}

interface Pending {
  call: QueuedCall;
  /** Its tries in batches so far, this one included (a member refused on its own goes out again: `#retryMember`). */
  attempt: number;
  resolve(held: HeldOutcome): void;
  reject(error: unknown): void;
}

/** A batchable tool's calls waiting for company: past its grace, a batch waits only for calls that may still join. */
interface Gathering {
  tool: AnyTool;
  members: Pending[];
  graceOver: boolean;
  timers: ReturnType<typeof setTimeout>[];
  onAbort: () => void;
}

/** The invocation's services, the map's window, and the chunk's row workers. */
export interface ToolQueueOptions {
  services: DispatchServices;
  window: DispatchWindow;
  /** The chunk's row workers: requests in flight hold its bulk receipt calls back until they return. */
  workers?: WorkerBarrier;
  /** Hears when the calls ready (see {@link ToolQueue.busy}) fall below a connection's worth. */
  onReadyLow?: () => void;
  /** Hears when a call must wait for a place in the dispatch window, which only written receipts free. */
  onWindowFull?: () => void;
  /** The run sends requests whose outcome is unknown again (`retryUnknown`): a timed-out one is retried here too. */
  retryUnknown?: boolean;
}

/** One chunk attempt's queue of owned calls; see the module comment. */
export class ToolQueue {
  #services: DispatchServices;
  #window: DispatchWindow;
  #workers: WorkerBarrier | undefined;
  #gatherings = new Map<string, Gathering>();
  /** Members of all gatherings. */
  #gathered = 0;
  /** Calls of the attempt on their way to an outcome ({@link ToolQueue.began}), gathered members included. */
  #running = 0;
  #review: ReturnType<typeof setTimeout> | null = null;
  #lanes = new BatchLanes();
  #ready = 0;
  #onReadyLow: (() => void) | undefined;
  #onWindowFull: (() => void) | undefined;
  #retryUnknown: boolean;

  constructor(options: ToolQueueOptions) {
    this.#retryUnknown = options.retryUnknown ?? false;
    this.#services = options.services;
    this.#window = options.window;
    this.#workers = options.workers;
    this.#onReadyLow = options.onReadyLow;
    this.#onWindowFull = options.onWindowFull;
  }

  /**
   * A connection's worth of calls is ready: they have a place in the
   * dispatch window and their requests have not left yet (they wait for a
   * pacing slot or a connection), so the attempt's connections stay busy
   * without anything more from its receipts.
   */
  get busy(): boolean {
    return this.#ready >= MAX_OUTBOUND_IN_FLIGHT;
  }

  /** Calls wait for a place in the dispatch window: only written receipts free one. */
  get windowFull(): boolean {
    return this.#window.waiting > 0;
  }

  /** Enters the window for `weight` calls; one that must wait for room says so first (held receipts make room). */
  async #enter(weight: number, signal: AbortSignal): Promise<void> {
    if (this.#window.wouldWait(weight)) this.#onWindowFull?.();
    await this.#window.enter(weight, signal);
  }

  /** Counts `weight` calls as ready until the returned function says their request left (idempotent). */
  #readyUntilSent(weight: number): () => void {
    this.#ready += weight;
    let sent = false;
    return () => {
      if (sent) return;
      sent = true;
      this.#ready -= weight;
      if (this.#ready < MAX_OUTBOUND_IN_FLIGHT) this.#onReadyLow?.();
    };
  }

  /**
   * A call of the attempt is on its way to an outcome until the returned
   * function is called (idempotent): a batch past its grace waits for it,
   * as its row may call the batchable tool next. A follower of another call
   * is not one.
   */
  began(): () => void {
    this.#running++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#running--;
      if (this.#gatherings.size > 0) this.#reviewSoon();
    };
  }

  /** Sends one owned call (alone or in a batch) and resolves with its outcome. Rejects when prevented or aborted. */
  submit(tool: AnyTool, call: QueuedCall): Promise<HeldOutcome> {
    if (!tool.batch) return this.#single(tool, call);
    return new Promise<HeldOutcome>((resolve, reject) => this.#join(tool, { call, attempt: 1, resolve, reject }));
  }

  /** A batchable tool's call joins the tool's gathering (a full one goes at once). */
  #join(tool: AnyTool, member: Pending): void {
    const gathering = getOrInsert(this.#gatherings, tool.id, () => this.#gather(tool));
    gathering.members.push(member);
    this.#gathered++;
    this.#workers?.gather(1);
    if (gathering.members.length >= tool.batch!.maxMembers) this.#flush(tool);
    // This call may have been the last one running: any gathering past its grace (this tool's or another's) may go.
    else this.#reviewSoon();
  }

  /** Starts gathering `tool`'s calls: its grace, its hold (a quarter of the leases at most), and a cancel sending it on. */
  #gather(tool: AnyTool): Gathering {
    const { policy, signal } = this.#services;
    const holdMs = Math.max(policy.batchGraceMs, Math.min(policy.batchHoldMs, policy.rowLeaseTtlMs / 4, policy.receiptLeaseTtlMs / 4));
    const gathering: Gathering = { tool, members: [], graceOver: false, timers: [], onAbort: () => this.#flush(tool) };
    gathering.timers.push(
      setTimeout(() => {
        gathering.graceOver = true;
        this.#reviewSoon();
      }, policy.batchGraceMs),
      setTimeout(() => this.#flush(tool), holdMs),
    );
    // Aborted: the batch goes to the window at once, which refuses it, so its members hear it now.
    signal.addEventListener("abort", gathering.onAbort, { once: true });
    return gathering;
  }

  /**
   * Once the rows whose calls just returned have made their next call (a
   * macrotask later), sends every batch past its grace that no call of the
   * attempt can join any more: every call still on its way is a gathered
   * member.
   */
  #reviewSoon(): void {
    if (this.#review) return;
    this.#review = setTimeout(() => {
      this.#review = null;
      const aborted = this.#services.signal.aborted;
      if (this.#running > this.#gathered && !aborted) return;
      for (const gathering of [...this.#gatherings.values()]) if (gathering.graceOver || aborted) this.#flush(gathering.tool);
    }, 0);
  }

  #context(tool: AnyTool): ProviderCallContext {
    const { pacers, budget, faults, policy, signal, meter, log } = this.#services;
    return {
      toolId: tool.id,
      pacer: pacers.for(tool.provider),
      budget,
      faults,
      retry: policy,
      signal,
      meter,
      log,
      isRateLimit: (error) => tool.isRateLimit?.(error) === true,
      unkeyed: tool.idempotent === false && !this.#retryUnknown,
    };
  }

  /**
   * Sends one request under the provider timeout. A sent request is never
   * aborted by a cancel (its result is billed and must be stored); only the
   * timeout stops it, as a retryable failure. The timer is cleared when the
   * request settles, so no timer outlives the work.
   */
  async #timed<T>(send: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const timeoutMs = this.#services.policy.providerTimeoutMs;
    const timeout = timeoutSignal(timeoutMs, () => new ProviderTimeout(`the provider did not answer within ${timeoutMs} ms`));
    try {
      // A pacer holds six units per provider, but an executor calling two providers, or fetching too, shares its six
      // connections: the clock stops while a request waits for one.
      return await sendTimed(this.#services.signal, timeout, send);
    } catch (error) {
      // A stub's fetch rejects with an error of its own (the reason's message, not the reason): the timeout is
      // the reason, retryable, whatever the request threw.
      throw timeout.signal.aborted ? timeout.signal.reason : error;
    } finally {
      timeout.clear();
    }
  }

  /**
   * A provider request from its wait for a pacing slot to its answer (its
   * retries included): the chunk's bulk receipt calls wait for it, as it will
   * bring its row back with a completion to add. Sending them at every lull
   * between paced requests sent one or two receipts per call.
   */
  #outbound<T>(request: Promise<T>): Promise<T> {
    return this.#workers ? this.#workers.external(request) : request;
  }

  /** One call alone; `attempt`: its first try's number (a batch member refused before has had tries). */
  async #single(tool: AnyTool, call: QueuedCall, attempt = 1): Promise<HeldOutcome> {
    const { signal, env } = this.#services;
    // Refused before anything was sent (the attempt stopped): the receipt may say it was never sent.
    await this.#enter(1, signal).catch((error: unknown) => {
      throw new NotSent(error);
    });
    try {
      const result = await this.#outbound(
        this.#sending(tool, 1, () =>
          callProvider(
            this.#context(tool),
            (reportHeaders) =>
              this.#timed((requestSignal) =>
                tool.execute(call.input, {
                  idempotencyKey: call.idempotencyKey,
                  signal: requestSignal,
                  env: toolEnv(tool, env),
                  authScopeDigest: call.authScopeDigest,
                  reportHeaders,
                  fetch: outboundFetch(requestSignal),
                }),
              ),
            attempt,
          ),
        ),
      );
      return this.#held(result.ok ? { ok: true, output: result.value } : result);
    } catch (error) {
      this.#window.leave(1);
      throw error;
    }
  }

  /**
   * Runs a request of `tool` for `weight` calls: ready until it leaves (a
   * tool that sends some other way: until it ends), and timed from its last
   * send (a retry sends again) to its answer: the latency executors are
   * sized by.
   */
  async #sending<T>(tool: AnyTool, weight: number, request: () => Promise<T>): Promise<T> {
    const ready = this.#readyUntilSent(weight);
    let ended = null as ((timed: boolean) => void) | null;
    const sent = () => {
      // A retry sends again: the clock starts over.
      ended?.(false);
      ended = this.#services.observeRequest(tool.provider);
      ready();
    };
    try {
      return await withSendHooks({ sent }, request);
    } finally {
      ready();
      ended?.(true);
    }
  }

  #held(outcome: CallOutcome): HeldOutcome {
    let done = false;
    return {
      outcome,
      done: () => {
        if (done) return;
        done = true;
        this.#window.leave(1);
      },
    };
  }

  #flush(tool: AnyTool): void {
    const gathering = this.#gatherings.get(tool.id);
    if (!gathering) return;
    this.#gatherings.delete(tool.id);
    for (const timer of gathering.timers) clearTimeout(timer);
    this.#services.signal.removeEventListener("abort", gathering.onAbort);
    const pending = gathering.members;
    this.#gathered -= pending.length;
    this.#workers?.gather(-pending.length);
    if (pending.length === 1) {
      const [only] = pending;
      this.#single(tool, only!.call, only!.attempt).then(only!.resolve, only!.reject);
      return;
    }
    for (const batch of planBatches(pending, tool.batch!.maxMembers)) {
      void this.#lanes.run(tool.id, this.#services.pacers.for(tool.provider).policy.batchParallelism, () => this.#batch(tool, batch));
    }
  }

  /** One batch request; never throws (each member hears its own outcome or error). */
  async #batch(tool: AnyTool, members: Pending[]): Promise<void> {
    const strategy = tool.batch!;
    const { signal, env } = this.#services;
    try {
      await this.#enter(members.length, signal);
    } catch (error) {
      // Refused before anything was sent (the attempt stopped): each member's receipt may say it was never sent.
      for (const member of members) member.reject(new NotSent(error));
      return;
    }
    let outcomes: CallOutcome[];
    /** What the provider refused of each member on its own (the batch answered): may be retried, as a call's failure. */
    let refused: (ToolCallError | null)[] = [];
    try {
      const batchMembers: BatchMember<unknown>[] = members.map((m) => ({ input: m.call.input, idempotencyKey: m.call.idempotencyKey }));
      const result = await this.#outbound(
        this.#sending(tool, members.length, () =>
          callProvider(this.#context(tool), (reportHeaders) =>
            this.#timed((requestSignal) =>
              strategy.send(strategy.compile(batchMembers), {
                signal: requestSignal,
                env: toolEnv(tool, env),
                reportHeaders,
                fetch: outboundFetch(requestSignal),
              }),
            ),
          ),
        ),
      );
      if (!result.ok) outcomes = members.map(() => result);
      else {
        try {
          const split = checkSplit(strategy.split(result.value, batchMembers), members.length, tool.id);
          outcomes = split.map((r) =>
            r.ok
              ? { ok: true, output: r.output }
              : { ok: false, error: { code: r.error.code, message: r.error.message }, retryable: r.error.retryable },
          );
          refused = split.map((r) => (r.ok ? null : new ToolCallError(r.error)));
        } catch (error) {
          // Billed, but unattributable: fail retryably, so a rerun asks again with the same keys (replayed, not
          // re-billed). A provider that ignores the keys would bill them again: failed for good, each member billed.
          const split = { code: "batch_split_failed", message: messageOf(error) };
          const unkeyed = tool.idempotent === false && !this.#retryUnknown;
          const failure: CallOutcome = unkeyed
            ? { ok: false, error: split, retryable: false, billed: true }
            : { ok: false, error: split, retryable: true };
          outcomes = members.map(() => failure);
        }
      }
    } catch (error) {
      this.#window.leave(members.length);
      for (const member of members) member.reject(error);
      return;
    }
    // Members refused as rate limited slow the provider's callers once for the batch, not once each.
    let told = false;
    await Promise.all(
      members.map(async (member, i) => {
        const error = refused[i];
        const failure = error ? classifyFailure(error, (e) => tool.isRateLimit?.(e) === true) : null;
        const tellPacer = failure?.retry.kind === "rate_limited" && !told;
        if (tellPacer) told = true;
        if (!failure || !(await this.#retryMember(tool, member, failure.retry, tellPacer, outcomes[i]!)))
          member.resolve(this.#held(outcomes[i]!));
      }),
    );
  }

  /**
   * A member the provider refused on its own, as retryable (a 5xx, a rate
   * limit of its own), goes out again in a later batch after the calls'
   * backoff, within their attempts and the run's retry budget, as a single
   * call's request would (`callProvider` retries the batch request itself,
   * not its members). Answers false when it may not: its outcome stands.
   */
  async #retryMember(tool: AnyTool, member: Pending, retry: RetryClass, tellPacer: boolean, outcome: CallOutcome): Promise<boolean> {
    if (this.#services.signal.aborted) return false;
    const waitMs = await retryWait(this.#context(tool), retry, member.attempt, { tellPacer });
    if (waitMs === null) return false;
    // Out, as a request is, until it joins again: the chunk's bulk receipt calls wait for its row. It keeps its place
    // in the window meanwhile, as a call retried in `callProvider` does, and takes it again with its next batch.
    void this.#outbound(sleep(waitMs, this.#services.signal)).then(
      () => {
        this.#window.leave(1);
        this.#join(tool, { ...member, attempt: member.attempt + 1 });
      },
      // Stopped while it waits: this refusal is its outcome.
      () => member.resolve(this.#held(outcome)),
    );
    return true;
  }
}
