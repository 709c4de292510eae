/**
 * One chunk attempt's receipt writes: its claims, completions and failures,
 * queued per shard and sent together, one call per shard
 * (`ReceiptClient.write`), held while the attempt's requests keep its
 * connections busy.
 */
import { BulkQueue, type WorkerBarrier } from "../../core/bulk-queue";
import { getOrInsert } from "../../core/collections";
import { type AttemptRef, type ReceiptClaim, type ReceiptError, RPC_PAGE_CHARS } from "../../contracts/shards";
import type { DispatchServices } from "./services";

export type ClaimItem = { key: string; toolId: string; takeover: boolean; staleBefore?: number };
type CompleteItem = { key: string; output: unknown };
export type FailItem = { key: string; error: ReceiptError; retryable: boolean };
/** One receipt write of the attempt's bulk queue: a shard's writes go in one call (ReceiptClient.write). */
type ReceiptOp =
  | { kind: "claim"; refresh: boolean; item: ClaimItem }
  | { kind: "complete"; item: CompleteItem; chars: number }
  | { kind: "fail"; item: FailItem };

export class ReceiptWrites {
  #queue: BulkQueue<ReceiptOp, ReceiptClaim | boolean>;
  #unwritten = 0;

  constructor(options: {
    services: Pick<DispatchServices, "receipts" | "policy">;
    attempt: AttemptRef;
    /** `retryUnknown` for the whole run (its claims say so). */
    retryUnknown: boolean;
    workers?: WorkerBarrier;
    /** Whether to hold the writes now, with this many completions and failures unwritten. */
    busy(unwritten: number): boolean;
  }) {
    const { receipts, policy } = options.services;
    const { attempt, retryUnknown } = options;
    // Held while the attempt has a connection's worth of requests ready to go: those requests, not these receipts,
    // decide when its connections are next free, so waiting longer costs no throughput and saves calls. Not held
    // while a call waits for a window place and a completion or failure is queued (only a written receipt frees
    // one). Claims go with the completions and failures, one call per shard: other rows' next calls are claimed as
    // these complete.
    // Never for long against the receipt lease: a completion held past it could find its receipt taken over.
    const maxMs = Math.min(policy.receiptHoldMs, policy.receiptLeaseTtlMs / 4);
    this.#queue = new BulkQueue<ReceiptOp, ReceiptClaim | boolean>({
      maxWaitMs: policy.receiptMaxWaitMs,
      maxBatch: 500,
      // Completions carry outputs of up to 512 KiB: 500 of 64 KiB would pass the 32 MiB a call may carry.
      maxBatchSize: {
        max: RPC_PAGE_CHARS,
        sizeOf: (op) => (op.kind === "complete" ? op.chars : 0),
      },
      workers: options.workers,
      hold: { busy: () => options.busy(this.#unwritten), maxMs },
      send: async (shard, ops) => {
        const complete: CompleteItem[] = [];
        const fail: FailItem[] = [];
        const claims = new Map<boolean, ClaimItem[]>();
        for (const op of ops) {
          if (op.kind === "complete") complete.push(op.item);
          else if (op.kind === "fail") fail.push(op.item);
          else getOrInsert(claims, op.refresh, () => []).push(op.item);
        }
        this.#unwritten -= complete.length + fail.length;
        const groups = [...claims];
        const written = await receipts.write(Number(shard), {
          attempt,
          complete,
          fail,
          claims: groups.map(([refresh, items]) => ({
            leaseTtlMs: policy.receiptLeaseTtlMs,
            refresh,
            retryUnknown,
            items,
          })),
        });
        const completed = new Set(written.completed.accepted);
        const failed = new Set(written.failed.accepted);
        const claimed = new Map(groups.map(([refresh], i) => [refresh, written.claims[i]!.values()]));
        return ops.map((op) => {
          if (op.kind === "complete") return completed.has(op.item.key);
          if (op.kind === "fail") return failed.has(op.item.key);
          const result = claimed.get(op.refresh)!.next();
          if (result.done) throw new Error(`receipt claims: fewer results than items on shard ${shard}`);
          return result.value;
        });
      },
    });
  }

  /** Completions and failures queued, not sent yet: a call waiting for a window place waits for them. */
  get unwritten(): number {
    return this.#unwritten;
  }

  /** Sends what is queued without waiting for the hold to end. */
  nudge(): void {
    this.#queue.nudge();
  }

  async claim(shard: number, refresh: boolean, item: ClaimItem): Promise<ReceiptClaim> {
    return (await this.#queue.push(String(shard), { kind: "claim", refresh, item })) as ReceiptClaim;
  }

  /** Queues a completion (its output `chars` long as JSON): true when the receipt took it. */
  complete(shard: number, item: CompleteItem, chars: number): Promise<boolean> {
    return this.#write(shard, { kind: "complete", item, chars });
  }

  /** Queues a failure: true when the receipt took it. */
  fail(shard: number, item: FailItem): Promise<boolean> {
    return this.#write(shard, { kind: "fail", item });
  }

  async #write(shard: number, op: Exclude<ReceiptOp, { kind: "claim" }>): Promise<boolean> {
    this.#unwritten++;
    return (await this.#queue.push(String(shard), op)) as boolean;
  }
}
