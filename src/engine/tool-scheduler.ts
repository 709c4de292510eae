/**
 * The path from `ctx.tool(...)` to a provider, for one chunk attempt: receipt
 * keys, in-attempt dedupe (one owner, followers share its result), bulk
 * receipt claims and completions per ReceiptShard, dispositions, and
 * in-process retries of retryable provider failures.
 */
import { ToolCallError } from "../play/tool-error";
import type { ToolCallOptions, ToolDefinition } from "../play/types";
import { messageOf, TroupeError } from "../shared/errors";
import { sleep } from "../shared/time";
import type { AttemptRef, ReceiptClaim, ReceiptError, ReceiptWriteResult } from "../storage/contracts";
import { BulkQueue, type WorkerBarrier } from "./bulk-queue";
import type { FatalLatch } from "./latch";
import type { RuntimePolicy } from "./policy";
import { idempotencyKey, receiptKey } from "./receipt-keys";
import type { ReceiptClient, SubrequestMeter } from "./shard-clients";

export interface ToolSchedulerOptions {
  env: Env;
  org: string;
  tools: ReadonlyMap<string, ToolDefinition>;
  receipts: ReceiptClient;
  attempt: AttemptRef;
  policy: RuntimePolicy;
  /** `forceToolRefresh` for the whole run. */
  refresh: boolean;
  signal: AbortSignal;
  meter: SubrequestMeter;
  latch: FatalLatch;
  /** The chunk's row workers, so bulk receipt calls go out when every row waits. */
  workers?: WorkerBarrier;
  log(line: string): void;
}

type ClaimItem = { key: string; toolId: string };
type Outcome = { ok: true; output: unknown } | { ok: false; error: ReceiptError; retryable: boolean };

/** Receipt persistence failed: the run must stop (never bill into a broken store). */
export class ReceiptStoreError extends TroupeError {
  constructor(operation: string, cause: unknown) {
    super("receipt_store_failed", `could not ${operation} a tool receipt: ${messageOf(cause)}`, { cause });
  }
}

export class ToolScheduler {
  #o: ToolSchedulerOptions;
  #inflight = new Map<string, Promise<unknown>>();
  #claims: BulkQueue<ClaimItem, ReceiptClaim>;
  #completes: BulkQueue<{ key: string; output: unknown }, boolean>;
  #fails: BulkQueue<{ key: string; error: ReceiptError; retryable: boolean }, boolean>;

  constructor(options: ToolSchedulerOptions) {
    this.#o = options;
    const { receipts, attempt, policy } = options;
    const common = { maxWaitMs: policy.receiptMaxWaitMs, maxBatch: 500, workers: options.workers };
    const accepted = (items: { key: string }[], result: ReceiptWriteResult) => {
      const ok = new Set(result.accepted);
      return items.map((i) => ok.has(i.key));
    };
    this.#claims = new BulkQueue({
      ...common,
      send: async (group, items) => {
        const [shard, refresh] = group.split(":");
        const results = await receipts.claim(Number(shard), {
          attempt,
          leaseTtlMs: policy.receiptLeaseTtlMs,
          refresh: refresh === "1",
          items,
        });
        return results;
      },
    });
    this.#completes = new BulkQueue({
      ...common,
      send: async (shard, items) => accepted(items, await receipts.complete(Number(shard), { attempt, items })),
    });
    this.#fails = new BulkQueue({
      ...common,
      send: async (shard, items) => accepted(items, await receipts.fail(Number(shard), { attempt, items })),
    });
  }

  /** Calls a tool durably; identical calls in this attempt share one execution. */
  async call(toolId: string, input: unknown, options: ToolCallOptions = {}): Promise<unknown> {
    const tool = this.#o.tools.get(toolId);
    if (!tool) throw new ToolCallError({ code: "unknown_tool", message: `unknown tool ${JSON.stringify(toolId)}`, retryable: false });
    const parsed = tool.input.safeParse(input);
    if (!parsed.success) {
      throw new ToolCallError({ code: "invalid_tool_input", message: `invalid input for ${toolId}: ${parsed.error.issues.map((i) => `${i.path.join(".") || "input"}: ${i.message}`).join("; ")}`, retryable: false });
    }
    const key = await receiptKey({
      org: this.#o.org,
      toolId,
      toolVersion: tool.version,
      input: parsed.data,
      authScope: "default",
      staleAfterSeconds: options.staleAfterSeconds,
      nowMs: Date.now(),
    });
    const owner = this.#inflight.get(key);
    if (owner) return this.#park(owner);
    const call = this.#own(key, tool, parsed.data, this.#o.refresh || options.force === true);
    this.#inflight.set(key, call);
    return call;
  }

  /** A follower or a backoff waits without holding up the chunk's bulk calls. */
  #park<T>(promise: Promise<T>): Promise<T> {
    return this.#o.workers ? this.#o.workers.park(promise) : promise;
  }

  async #own(key: string, tool: ToolDefinition, input: unknown, refresh: boolean): Promise<unknown> {
    const { policy, signal } = this.#o;
    const shard = this.#o.receipts.shardOf(key);
    const waitUntil = Date.now() + policy.receiptWaitMs;
    for (let poll = 0; ; poll++) {
      signal.throwIfAborted();
      this.#o.latch.guard();
      const claim = await this.#claims.push(`${shard}:${refresh ? 1 : 0}`, { key, toolId: tool.id }).catch((error: unknown) => {
        throw this.#fatal(new ReceiptStoreError("claim", error));
      });
      switch (claim.disposition) {
        case "reused":
          return claim.output;
        case "failed":
          throw new ToolCallError({ code: claim.error.code, message: claim.error.message, retryable: false });
        case "running": {
          const left = waitUntil - Date.now();
          if (left <= 0) {
            throw new ToolCallError({
              code: "receipt_busy",
              message: `${tool.id} is being executed by another live attempt (${claim.owner.runId}); rerun once it finishes`,
              retryable: true,
            });
          }
          await this.#park(sleep(Math.min(left, 50 * 2 ** Math.min(poll, 4)), signal));
          continue;
        }
        case "claimed":
          return this.#execute(key, shard, tool, input, claim.generation);
      }
    }
  }

  async #execute(key: string, shard: number, tool: ToolDefinition, input: unknown, generation: number): Promise<unknown> {
    const outcome = await this.#invoke(tool, input, await idempotencyKey(key, generation));
    if (outcome.ok) {
      const accepted = await this.#completes.push(String(shard), { key, output: outcome.output }).catch((error: unknown) => {
        throw this.#fatal(new ReceiptStoreError("complete", error));
      });
      if (!accepted) this.#o.log(`receipt ${key.slice(0, 14)}… for ${tool.id} was taken over by a newer attempt; its result is kept there`);
      return outcome.output;
    }
    await this.#fails.push(String(shard), { key, error: outcome.error, retryable: outcome.retryable }).catch((error: unknown) => {
      throw this.#fatal(new ReceiptStoreError("fail", error));
    });
    throw new ToolCallError({ ...outcome.error, retryable: outcome.retryable });
  }

  /** Calls the provider, retrying retryable failures with capped, escalating delays. */
  async #invoke(tool: ToolDefinition, input: unknown, idempotency: string): Promise<Outcome> {
    const { policy, signal, env } = this.#o;
    for (let attempt = 1; ; attempt++) {
      signal.throwIfAborted();
      this.#o.latch.guard();
      this.#o.meter.provider++;
      try {
        // A cancel stops new calls, not one in flight: it may already be billed, so let it finish and complete its receipt.
        return { ok: true, output: await tool.execute(input, { idempotencyKey: idempotency, signal: new AbortController().signal, env }) };
      } catch (error) {
        if (signal.aborted) throw signal.reason;
        const failure =
          error instanceof ToolCallError
            ? { error: { code: error.code, message: error.message }, retryable: error.retryable, retryAfterMs: error.retryAfterMs }
            : { error: { code: "tool_error", message: messageOf(error) }, retryable: false, retryAfterMs: null };
        if (!failure.retryable || attempt >= policy.providerAttempts) return { ok: false, error: failure.error, retryable: failure.retryable };
        const backoff = Math.min(policy.providerRetryMaxMs, policy.providerRetryBaseMs * 2 ** (attempt - 1));
        await this.#park(sleep(Math.min(policy.providerRetryMaxMs, Math.max(backoff, failure.retryAfterMs ?? 0)), signal));
      }
    }
  }

  #fatal(error: Error): Error {
    this.#o.latch.trip(error);
    return error;
  }
}
