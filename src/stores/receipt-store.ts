/**
 * Durable receipts of tool calls: the logic of one ReceiptShard over its SQLite
 * storage and a clock. It knows nothing of Cloudflare beyond the `Sql` helper;
 * the actor wraps each call in one transaction and arms its alarm. What a
 * claim, a completion or a failure does to a receipt is receipt-rules.ts.
 *
 * Invariants:
 * - A `running` receipt is owned by one attempt until `leaseExpiresAt`; the
 *   lease is the only thing that lets another run take it over.
 * - `generation` changes only on a deliberate re-bill (`refresh`). Retries and
 *   takeovers keep it, so the provider idempotency key the caller derives from
 *   (key, generation) makes a retried call bill once.
 * - Writes are fenced by `owner.attemptId`: an attempt that lost the receipt
 *   never overwrites it.
 */
import type {
  AttemptRef,
  ClaimReceiptsRequest,
  CompleteReceiptsRequest,
  FailReceiptsRequest,
  LeaseRequest,
  LeaseResult,
  ReceiptWriteResult,
} from "../contracts/shards";
import type { AnswerBudget } from "./answer-budget";
import {
  answersUnknown,
  decideClaim,
  finished,
  isRecoveryMarker,
  type JsonValue,
  LEASE_EXPIRED,
  mayFinish,
  RELEASED,
  type Receipt,
  type ReceiptStatus,
  type StoredReceiptClaim,
} from "./receipt-rules";
import { batches, type Sql } from "./sql";

type ReceiptRow = {
  key: string;
  tool_id: string;
  status: string;
  output: string | null;
  error_code: string | null;
  error_message: string | null;
  retryable: number;
  generation: number;
  owner_run_id: string;
  owner_attempt_id: string;
  owner_seq: number;
  lease_expires_at: number | null;
  finished_by_run: string | null;
  created_at: number;
  updated_at: number;
  unknown_from: string | null;
  bought_at: number | null;
};

/** A receipt's row without its output: whether it has one (`stored_output`, 1 or 0) instead. */
type ReceiptHead = Omit<ReceiptRow, "output"> & { stored_output: number };

function rowToReceipt(row: Omit<ReceiptRow, "output">, output: JsonValue): Receipt {
  return {
    key: row.key,
    toolId: row.tool_id,
    // The column's CHECK constraint admits only the three statuses.
    status: row.status as ReceiptStatus,
    output,
    error: row.error_code === null ? null : { code: row.error_code, message: row.error_message ?? "" },
    retryable: row.retryable === 1,
    generation: row.generation,
    owner: { attemptId: row.owner_attempt_id, runId: row.owner_run_id, attemptSeq: row.owner_seq },
    leaseExpiresAt: row.lease_expires_at,
    finishedByRun: row.finished_by_run,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    unknownFrom: row.unknown_from === null ? [] : (JSON.parse(row.unknown_from) as string[]),
    boughtAt: row.bought_at ?? row.updated_at,
  };
}

export interface ReceiptStoreOptions {
  sql: Sql;
  /** Milliseconds since the epoch. */
  now: () => number;
}

/**
 * The receipts of one shard. Every method is synchronous; run each inside one
 * storage transaction so a call is atomic.
 */
export class ReceiptStore {
  readonly #sql: Sql;
  readonly #now: () => number;

  constructor(options: ReceiptStoreOptions) {
    this.#sql = options.sql;
    this.#now = options.now;
  }

  /**
   * Claims each item for `request.attempt`, in request order (a key repeated in
   * one request sees the effect of its earlier occurrence). See `decideClaim`
   * for the disposition rules. With a `budget`, claims stop at the first
   * reused output it has no room for: only the items before it are claimed and
   * answered (none once the budget is full), the others left as they were.
   */
  claim(request: ClaimReceiptsRequest, budget?: AnswerBudget): StoredReceiptClaim[] {
    if (budget?.full) return [];
    const now = this.#now();
    return this.#apply(request.items, (receipt, item) => {
      const decision = decideClaim(receipt, item, request, now);
      // A reuse changes nothing: stopping at it leaves the receipt as a claim asked again will find it.
      if (budget && decision.result.disposition === "reused" && !budget.take(decision.result.output)) return null;
      return decision;
    });
  }

  /**
   * Records outputs. Accepted when this attempt owns the receipt (running, or
   * expired/released with nobody having taken it over), or already completed it;
   * and from an attempt it was taken over from ({@link Receipt.unknownFrom})
   * when the taker failed it `outcome_unknown`, not learning how that
   * attempt's request ended: this is its answer, billed (refused, it was kept
   * nowhere, and a rerun under `retryUnknown` paid for it again). That
   * attempt then owns it, so a retry of the write is a repeat.
   */
  complete(request: CompleteReceiptsRequest): ReceiptWriteResult {
    const now = this.#now();
    return this.#finish(request.attempt, request.items, (receipt, item, owner) => {
      if (receipt.status === "completed") return owner ? "repeat" : "reject";
      const answers = answersUnknown(receipt, request.attempt);
      if (!(owner && mayFinish(receipt)) && !answers) return "reject";
      // Outputs are provider JSON, stored as JSON text: a Date or Map in one would not round-trip.
      const settled = {
        ...finished(receipt, request.attempt, now),
        status: "completed" as const,
        output: (item.output ?? null) as JsonValue,
      };
      return answers ? { ...settled, owner: request.attempt, unknownFrom: [] } : settled;
    });
  }

  /** Records failures, fenced like `complete`. A repeated fail keeps the first error. */
  fail(request: FailReceiptsRequest): ReceiptWriteResult {
    const now = this.#now();
    return this.#finish(request.attempt, request.items, (receipt, item, owner) => {
      if (!owner) return "reject";
      if (receipt.status === "failed" && !isRecoveryMarker(receipt)) return "repeat";
      if (!mayFinish(receipt)) return "reject";
      return { ...finished(receipt, request.attempt, now), status: "failed", error: item.error, retryable: item.retryable };
    });
  }

  /** Extends the leases of running receipts owned by `request.attempt`; every other key is lost. */
  renew(request: LeaseRequest): LeaseResult {
    const now = this.#now();
    const keys = [...new Set(request.keys)];
    const renewed = new Set(
      this.#sql<{ key: string }>`
        UPDATE receipts SET lease_expires_at = ${now + request.leaseTtlMs}, updated_at = ${now}
        WHERE status = 'running' AND owner_attempt_id = ${request.attempt.attemptId}
          AND key IN (SELECT value FROM json_each(${JSON.stringify(keys)}))
        RETURNING key`.map((row) => row.key),
    );
    return { renewed: keys.filter((key) => renewed.has(key)), lost: keys.filter((key) => !renewed.has(key)) };
  }

  /**
   * Teardown of a run: its running receipts become failed, retryable, code
   * `released`, so an immediate rerun reclaims them instead of waiting out a lease.
   * @returns how many receipts were released.
   */
  releaseRun(runId: string): number {
    const now = this.#now();
    return this.#sql<{ key: string }>`
      UPDATE receipts
      SET status = 'failed', error_code = ${RELEASED}, retryable = 1, lease_expires_at = NULL, updated_at = ${now},
          error_message = 'released by run ' || owner_run_id || ' on teardown before the call finished'
      WHERE status = 'running' AND owner_run_id = ${runId}
      RETURNING key`.length;
  }

  /**
   * Running receipts whose lease has passed become failed, retryable, code
   * `lease_expired`. Idempotent.
   * @returns how many receipts expired.
   */
  expireLeases(): number {
    const now = this.#now();
    return this.#sql<{ key: string }>`
      UPDATE receipts
      SET status = 'failed', error_code = ${LEASE_EXPIRED}, retryable = 1, lease_expires_at = NULL, updated_at = ${now},
          error_message = 'lease expired: owner attempt ' || owner_attempt_id || ' of run ' || owner_run_id
            || ' stopped heartbeating before the call finished'
      WHERE status = 'running' AND lease_expires_at <= ${now}
      RETURNING key`.length;
  }

  /** The earliest lease expiry among running receipts (when the alarm is due), or null. */
  nextLeaseExpiry(): number | null {
    const row = this.#sql<{ at: number | null }>`
      SELECT MIN(lease_expires_at) AS at FROM receipts WHERE status = 'running'`[0];
    return row?.at ?? null;
  }

  /** One receipt as plain data (its output read), or null. */
  get(key: string): Receipt | null {
    const receipt = this.#load([key]).get(key);
    return receipt ? { ...receipt } : null;
  }

  /** The receipts of `keys` that exist, by key; an output is read from storage when used (in the same synchronous call). */
  getMany(keys: string[]): Map<string, Receipt> {
    return this.#load(keys);
  }

  /**
   * The receipts of `keys`, each output read from storage when first used (in the same synchronous call): a claim or
   * peek answers only the outputs one RPC carries, and reading hundreds of 512 KiB outputs passed an isolate's 128 MB.
   */
  #load(keys: string[]): Map<string, Receipt> {
    const rows = this.#sql<ReceiptHead>`
      SELECT key, tool_id, status, output IS NOT NULL AS stored_output, error_code, error_message, retryable, generation,
        owner_run_id, owner_attempt_id, owner_seq, lease_expires_at, finished_by_run, created_at, updated_at,
        unknown_from, bought_at
      FROM receipts WHERE key IN (SELECT value FROM json_each(${JSON.stringify([...new Set(keys)])}))`;
    return new Map(rows.map((row) => [row.key, row.stored_output ? this.#withStoredOutput(row) : rowToReceipt(row, null)]));
  }

  /** `row`'s receipt, whose `output` is read (and parsed) from storage on first use. */
  #withStoredOutput(row: Omit<ReceiptRow, "output">): Receipt {
    let output: { value: JsonValue } | null = null;
    const get = () => {
      if (output) return output.value;
      const [stored] = this.#sql<{ output: string }>`SELECT output FROM receipts WHERE key = ${row.key}`;
      output = { value: JSON.parse(stored!.output) as JsonValue };
      return output.value;
    };
    return Object.defineProperty(rowToReceipt(row, null), "output", { enumerable: true, get });
  }

  /**
   * One read, one decision per item in order (each sees the earlier ones' effect), one bulk write. A decision of
   * null stops there: the results are the earlier items'.
   */
  #apply<I extends { key: string }, R>(
    items: I[],
    decide: (receipt: Receipt | undefined, item: I) => { result: R; next?: Receipt } | null,
  ): R[] {
    const receipts = this.#load(items.map((item) => item.key));
    const changed = new Map<string, Receipt>();
    const results: R[] = [];
    for (const item of items) {
      const decision = decide(receipts.get(item.key), item);
      if (decision === null) break;
      if (decision.next) {
        receipts.set(item.key, decision.next);
        changed.set(item.key, decision.next);
      }
      results.push(decision.result);
    }
    this.#save([...changed.values()]);
    return results;
  }

  /** Fenced terminal writes: `decide` is told whether `attempt` owns the receipt (most writes need it to). */
  #finish<I extends { key: string }>(
    attempt: AttemptRef,
    items: I[],
    decide: (receipt: Receipt, item: I, owner: boolean) => Receipt | "repeat" | "reject",
  ): ReceiptWriteResult {
    const outcomes = this.#apply(items, (receipt, item) => {
      const decision = receipt ? decide(receipt, item, receipt.owner.attemptId === attempt.attemptId) : "reject";
      return typeof decision === "object" ? { result: true, next: decision } : { result: decision === "repeat" };
    });
    const accepted = new Map<string, boolean>();
    for (const [i, item] of items.entries()) if (!accepted.has(item.key)) accepted.set(item.key, outcomes[i]!);
    const keys = [...accepted.keys()];
    return { accepted: keys.filter((key) => accepted.get(key)), rejected: keys.filter((key) => !accepted.get(key)) };
  }

  /**
   * Writes whole receipts, one JSON parameter per batch (any count stays under
   * the bind limit), batched by size: SQLite caps a bound string at 2 MB, and
   * a write may complete hundreds of receipts with sizeable outputs.
   */
  #save(receipts: Receipt[]): void {
    const rows = receipts.map((receipt) => JSON.stringify(receiptToRow(receipt)));
    for (const batch of batches(rows, (row) => row.length)) this.#saveRows(`[${batch.join(",")}]`);
  }

  #saveRows(rows: string): void {
    // REPLACE is safe: the row carries every column (created_at included) and nothing references it.
    this.#sql.write`
      INSERT OR REPLACE INTO receipts (key, tool_id, status, output, error_code, error_message, retryable,
        generation, owner_run_id, owner_attempt_id, owner_seq, lease_expires_at, finished_by_run, created_at, updated_at,
        unknown_from, bought_at)
      SELECT r ->> 'key', r ->> 'tool_id', r ->> 'status', r ->> 'output', r ->> 'error_code', r ->> 'error_message',
        r ->> 'retryable', r ->> 'generation', r ->> 'owner_run_id', r ->> 'owner_attempt_id', r ->> 'owner_seq',
        r ->> 'lease_expires_at', r ->> 'finished_by_run', r ->> 'created_at', r ->> 'updated_at', r ->> 'unknown_from',
        r ->> 'bought_at'
      FROM (SELECT value AS r FROM json_each(${rows}))`;
  }
}

function receiptToRow(r: Receipt): ReceiptRow {
  return {
    key: r.key,
    tool_id: r.toolId,
    status: r.status,
    output: r.status === "completed" ? JSON.stringify(r.output ?? null) : null,
    error_code: r.error?.code ?? null,
    error_message: r.error?.message ?? null,
    retryable: r.retryable ? 1 : 0,
    generation: r.generation,
    owner_run_id: r.owner.runId,
    owner_attempt_id: r.owner.attemptId,
    owner_seq: r.owner.attemptSeq,
    lease_expires_at: r.leaseExpiresAt,
    finished_by_run: r.finishedByRun,
    created_at: r.createdAt,
    updated_at: r.updatedAt,
    unknown_from: r.unknownFrom.length ? JSON.stringify(r.unknownFrom) : null,
    bought_at: r.boughtAt,
  };
}
