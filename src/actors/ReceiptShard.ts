import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { parseRpcInput } from "../core/errors";
import {
  ClaimReceiptsRequest,
  CompleteReceiptsRequest,
  FailReceiptsRequest,
  LeaseRequest,
  type LeaseResult,
  type ReceiptWriteResult,
  ReleaseRequest,
  WriteReceiptsRequest,
  type WriteReceiptsResult,
} from "../contracts/shards";
import { AnswerBudget } from "../stores/answer-budget";
import { RECEIPT_MIGRATIONS } from "../stores/receipt-schema";
import { OUTCOME_UNKNOWN, type Receipt, type StoredReceiptClaim } from "../stores/receipt-rules";
import { ReceiptStore } from "../stores/receipt-store";
import { createSql, migrate } from "../stores/sql";

export const GetReceiptRequest = z.object({ key: z.string().min(1).max(512) });
export type GetReceiptRequest = z.infer<typeof GetReceiptRequest>;

/** `peek`: receipts by key, read only (estimates). */
export const PeekReceiptsRequest = z.object({ keys: z.array(z.string().min(1).max(512)).max(1000) });
export type PeekReceiptsRequest = z.infer<typeof PeekReceiptsRequest>;

/** `PeekedReceipt` as its RPC type: workerd's `Rpc` types cannot carry `unknown`, so the JSON output is `{} | null` here. */
type PeekedReceiptOverRpc =
  | { key: string; state: "reused"; output: {} | null; boughtAt: number }
  | { key: string; state: "failed" | "unknown"; boughtAt: number }
  | { key: string; state: "new" };

/**
 * The durable receipts of tool calls for one shard of one org's receipt keys
 * (named by the caller). A thin actor: it validates RPC input, runs each call
 * as one transaction on a `ReceiptStore`, and keeps its alarm at the earliest
 * running lease so that receipts of dead owners become reclaimable.
 *
 * Invalid input throws a `ValidationError` (code `invalid_request`).
 */
export class ReceiptShard extends DurableObject<Env> {
  readonly #store: ReceiptStore;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#store = new ReceiptStore({ sql: createSql(ctx.storage), now: () => Date.now() });
    void ctx.blockConcurrencyWhile(async () => migrate(ctx.storage, RECEIPT_MIGRATIONS));
  }

  /** Claims receipts for an attempt; one result per item, in request order. */
  async claim(input: ClaimReceiptsRequest): Promise<{ results: StoredReceiptClaim[] }> {
    const request = parseRpcInput(ClaimReceiptsRequest, input);
    const results = this.ctx.storage.transactionSync(() => this.#store.claim(request));
    await this.#armNextAlarm();
    return { results };
  }

  /** Records provider outputs, fenced by the owning attempt. */
  async complete(input: CompleteReceiptsRequest): Promise<ReceiptWriteResult> {
    const request = parseRpcInput(CompleteReceiptsRequest, input);
    const result = this.ctx.storage.transactionSync(() => this.#store.complete(request));
    await this.#armNextAlarm();
    return result;
  }

  /** Records provider failures, fenced by the owning attempt. */
  async fail(input: FailReceiptsRequest): Promise<ReceiptWriteResult> {
    const request = parseRpcInput(FailReceiptsRequest, input);
    const result = this.ctx.storage.transactionSync(() => this.#store.fail(request));
    await this.#armNextAlarm();
    return result;
  }

  /**
   * Completions, failures, then claims of one attempt, in one transaction (see WriteReceiptsRequest). The claims
   * stop before the reused output that would take the answer past RPC_PAGE_CHARS (see WriteReceiptsResult).
   */
  async write(input: WriteReceiptsRequest): Promise<WriteReceiptsResult<StoredReceiptClaim>> {
    const { attempt, complete, fail, claims } = parseRpcInput(WriteReceiptsRequest, input);
    const none: ReceiptWriteResult = { accepted: [], rejected: [] };
    const budget = new AnswerBudget();
    const result = this.ctx.storage.transactionSync(() => ({
      completed: complete.length ? this.#store.complete({ attempt, items: complete }) : none,
      failed: fail.length ? this.#store.fail({ attempt, items: fail }) : none,
      claims: claims.map((group) => this.#store.claim({ ...group, attempt }, budget)),
    }));
    await this.#armNextAlarm();
    return result;
  }

  /** Heartbeat: extends the leases the attempt still holds. */
  async renew(input: LeaseRequest): Promise<LeaseResult> {
    const request = parseRpcInput(LeaseRequest, input);
    const result = this.ctx.storage.transactionSync(() => this.#store.renew(request));
    await this.#armNextAlarm();
    return result;
  }

  /** Teardown on cancel or a run-fatal error: the run's running receipts become reclaimable now. */
  async releaseRun(input: ReleaseRequest): Promise<{ released: number }> {
    const request = parseRpcInput(ReleaseRequest, input);
    const released = this.ctx.storage.transactionSync(() => this.#store.releaseRun(request.runId));
    await this.#armNextAlarm();
    return { released };
  }

  /**
   * Which receipts a claim would reuse now, with their outputs (read only; the others come back not reusable), in
   * order: the first keys only, up to the output that would take the answer past RPC_PAGE_CHARS.
   */
  async peek(input: PeekReceiptsRequest): Promise<{ receipts: PeekedReceiptOverRpc[] }> {
    const { keys } = parseRpcInput(PeekReceiptsRequest, input);
    const found = this.#store.getMany(keys);
    const budget = new AnswerBudget();
    const receipts: PeekedReceiptOverRpc[] = [];
    for (const key of keys) {
      const receipt = found.get(key);
      if (receipt?.status === "completed") {
        if (!budget.take(receipt.output)) break;
        receipts.push({ key, state: "reused", output: receipt.output as {} | null, boughtAt: receipt.boughtAt });
      } else if (receipt?.status === "failed" && !receipt.retryable)
        receipts.push({ key, state: receipt.error?.code === OUTCOME_UNKNOWN ? "unknown" : "failed", boughtAt: receipt.boughtAt });
      else receipts.push({ key, state: "new" });
    }
    return { receipts };
  }

  /** One receipt as plain data, or null (diagnostics and tests). */
  async get(input: GetReceiptRequest): Promise<Receipt | null> {
    return this.#store.get(parseRpcInput(GetReceiptRequest, input).key);
  }

  /** Expires the leases of dead owners. At-least-once safe; re-arms even when it throws. */
  override async alarm(): Promise<void> {
    try {
      this.ctx.storage.transactionSync(() => this.#store.expireLeases());
    } finally {
      await this.#armNextAlarm();
    }
  }

  async #armNextAlarm(): Promise<void> {
    const next = this.#store.nextLeaseExpiry();
    if (next === null) await this.ctx.storage.deleteAlarm();
    else await this.ctx.storage.setAlarm(next);
  }
}
