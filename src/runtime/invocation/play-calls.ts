/**
 * The play's own tool calls (`ctx.tool` outside any map's rows), under leases
 * as a chunk attempt's calls are ({@link AttemptLeases}): while any of them is
 * pending, a heartbeat renews the receipts they hold, one call per receipt
 * shard per beat, and it stops when they settle. A lost lease (another run
 * took a receipt over, or no beat confirmed the leases before they would
 * expire) stops the calls of its generation before they send. Each of them
 * then claims its receipt again under a fresh generation, as a redispatched
 * chunk would: it finds the new owner's result, or waits for it.
 *
 * No call outlives the invocation that made it (`end`): one left pending as the
 * play stopped (unawaited, or beside a wait) would hold a receipt the next
 * invocation's replay takes for a dead owner's (owner-liveness.ts).
 */
import type { AttemptRef } from "../../contracts/shards";
import { TroupeError } from "../../core/errors";
import type { ToolCallOptions } from "../../play/types";
import type { AttemptLeases } from "../map/attempt-leases";
import { playAttemptId } from "../tools/owner-liveness";
import type { ToolScheduler } from "../tools/tool-scheduler";

/** Generations one call may go through: a receipt lost this often stays lost, and the call fails with its loss. */
const MAX_GENERATIONS_PER_CALL = 3;

/** What the play's calls need: the run, its attempt epoch and signal, and how to build one generation. */
export interface PlayCallsOptions {
  runId: string;
  /** The run's attempt epoch now. */
  attemptSeq(): number;
  /** The invocation's id: its attempts are told apart from an earlier invocation's (which are dead to it). */
  invocation: string;
  /** The run's signal: a call it stopped is not claimed again. */
  signal: AbortSignal;
  /** Leases of `attempt`, over the org's receipt shards, holding no rows, that stop with `signal`. */
  leases(attempt: AttemptRef, signal: AbortSignal): AttemptLeases;
  /** A tool scheduler whose tool path stops with `leases` and reports its receipts to them. */
  scheduler(attempt: AttemptRef, leases: AttemptLeases): ToolScheduler;
}

/** One attempt of the play's calls: its leases, its scheduler (which dedupes identical calls), its calls pending. */
interface Generation {
  leases: AttemptLeases;
  scheduler: ToolScheduler;
  pending: number;
}

/** The play's tool calls in one invocation; see the module comment. */
export class PlayCalls {
  #deps: PlayCallsOptions;
  #current: Generation | null = null;
  #generations = 0;
  #ended = new AbortController();
  /** The run's signal, or the invocation's end. */
  #signal: AbortSignal;
  #pending = new Set<Promise<unknown>>();

  constructor(options: PlayCallsOptions) {
    this.#deps = options;
    this.#signal = AbortSignal.any([options.signal, this.#ended.signal]);
  }

  /** Calls a tool durably, its receipt renewed until the call settles. */
  call(toolId: string, input: unknown, options?: ToolCallOptions): Promise<unknown> {
    const call = this.#call(toolId, input, options);
    this.#pending.add(call);
    const settled = () => void this.#pending.delete(call);
    call.then(settled, settled);
    return call;
  }

  /**
   * The invocation ends: its calls not sent yet stop (their receipts say so: the replay makes them), and those
   * sent are waited for (their answers stored), so that none outlives it.
   */
  async end(): Promise<void> {
    this.#ended.abort(new TroupeError("invocation_ended", "the play's invocation ended before this call was made"));
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
  }

  async #call(toolId: string, input: unknown, options?: ToolCallOptions): Promise<unknown> {
    for (let tries = 1; ; tries++) {
      const generation = this.#generation();
      try {
        return await this.#callIn(generation, toolId, input, options);
      } catch (error) {
        // Its generation lost a lease (not the run's stop): whatever it threw (the loss itself, or an earlier try's
        // failure that the loss kept from being tried again, a 429's wait say), nothing more was sent under a lease
        // another attempt holds, and its receipt decides what comes next.
        if (generation.leases.lost === null || this.#signal.aborted || tries >= MAX_GENERATIONS_PER_CALL) throw error;
      }
    }
  }

  /** The generation that holds no lost lease; a new one (a new attempt id) once the last one lost some. */
  #generation(): Generation {
    if (this.#current && this.#current.leases.lost === null) return this.#current;
    const attemptSeq = this.#deps.attemptSeq();
    const n = this.#generations++;
    const attempt = {
      attemptId: playAttemptId(this.#deps.runId, attemptSeq, this.#deps.invocation, n),
      runId: this.#deps.runId,
      attemptSeq,
    };
    const leases = this.#deps.leases(attempt, this.#signal);
    this.#current = { leases, scheduler: this.#deps.scheduler(attempt, leases), pending: 0 };
    return this.#current;
  }

  async #callIn(generation: Generation, toolId: string, input: unknown, options?: ToolCallOptions): Promise<unknown> {
    if (generation.pending++ === 0) generation.leases.start();
    try {
      return await generation.scheduler.call(toolId, input, options);
    } finally {
      // Settled: what the generation still holds belongs to no pending call, and is not renewed.
      if (--generation.pending === 0) {
        generation.leases.forgetReceipts();
        await generation.leases.stop();
      }
    }
  }
}
