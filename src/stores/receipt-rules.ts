/**
 * What a receipt is, and the rules that decide what a claim, a completion or a
 * failure does to one: pure functions of the receipt, the request and the
 * clock, which ReceiptStore applies in its transaction.
 */
import type { AttemptRef, ClaimReceiptsRequest, ReceiptClaim, ReceiptError } from "../contracts/shards";

/** Error code of a receipt whose owner stopped renewing its lease (set by the alarm). */
export const LEASE_EXPIRED = "lease_expired";
/** Error code of a receipt released by its run's teardown (cancel, run-fatal error). */
export const RELEASED = "released";
/**
 * A request whose outcome is unknown, to a provider that ignores idempotency
 * keys: not sent again unless the run asks (`retryUnknown`).
 */
export const OUTCOME_UNKNOWN = "outcome_unknown";
/** A call cut off before its request left (a cancel): retryable, and nothing reached the provider. */
export const NOT_SENT = "not_sent";

export type ReceiptStatus = "running" | "completed" | "failed";

/**
 * A JSON value, as a stored output reads back. Typed shallowly on purpose: RPC
 * stub types reject `unknown` and give up on a recursive JSON type.
 */
export type JsonValue = string | number | boolean | null | object;

/** A `ReceiptClaim` whose reused output is typed as the JSON it was stored as. */
export type StoredReceiptClaim =
  | Exclude<ReceiptClaim, { disposition: "reused" }>
  | { key: string; disposition: "reused"; output: JsonValue; generation: number; finishedByRun: string | null };

/** One receipt as plain data (what `get` returns). */
export interface Receipt {
  key: string;
  toolId: string;
  status: ReceiptStatus;
  /** The provider's output when `completed`, else null. */
  output: JsonValue;
  error: ReceiptError | null;
  retryable: boolean;
  generation: number;
  /** The attempt that last claimed it (still recorded after it finished). */
  owner: AttemptRef;
  /** Set only while `running`. */
  leaseExpiresAt: number | null;
  /** The run that completed or failed the current generation. */
  finishedByRun: string | null;
  createdAt: number;
  updatedAt: number;
  /**
   * The earliest a request whose answer this generation holds (or will) can have gone out: its first claim, kept by
   * takeovers of a request whose end is unknown (their answer may be that request's), moved by a claim after a
   * known failure. A result's age (`staleBefore`) is reckoned from it, not from when it was written back.
   */
  boughtAt: number;
  /**
   * The attempts whose claims of this generation were taken over, their requests' ends unknown (the most recent
   * MAX_UNKNOWN_FROM; empty when none): if the receipt then failed `outcome_unknown`, the late answer of any of
   * them settles it (see `complete`).
   */
  unknownFrom: string[];
}

/** Attempts of one generation a receipt remembers as maybe still answering (a takeover each). */
const MAX_UNKNOWN_FROM = 16;

/** A failed receipt written by recovery (alarm or teardown), not by its owner's own result. */
export function isRecoveryMarker(receipt: Receipt): boolean {
  return receipt.status === "failed" && (receipt.error?.code === LEASE_EXPIRED || receipt.error?.code === RELEASED);
}

/**
 * Whether the owner may still finish this receipt. Lease expiry alone does not
 * fence: until another attempt claims it, the owner's late result is the call's
 * real outcome (and was likely billed), so it is kept.
 */
export function mayFinish(receipt: Receipt): boolean {
  return receipt.status === "running" || isRecoveryMarker(receipt);
}

/**
 * Who may still answer a claim of `generation`: in the same generation, those remembered so far (an owner claiming
 * again keeps them), and the owner taken over when its request's end is unknown; none in a new generation.
 */
function maybeAnswering(existing: Receipt | undefined, generation: number, takenOverUnknown: boolean): string[] {
  if (!existing || existing.generation !== generation) return [];
  const known = [...existing.unknownFrom];
  if (takenOverUnknown && !known.includes(existing.owner.attemptId)) known.push(existing.owner.attemptId);
  return known.slice(-MAX_UNKNOWN_FROM);
}

/** Failed because the end of `attempt`'s request (taken over from it) could not be learned: its answer settles it. */
export function answersUnknown(receipt: Receipt, attempt: AttemptRef): boolean {
  return receipt.status === "failed" && receipt.error?.code === OUTCOME_UNKNOWN && receipt.unknownFrom.includes(attempt.attemptId);
}

export function finished(receipt: Receipt, attempt: AttemptRef, now: number): Receipt {
  return { ...receipt, output: null, error: null, retryable: false, leaseExpiresAt: null, finishedByRun: attempt.runId, updatedAt: now };
}

/**
 * The disposition of one claim, and the receipt to store when it changes:
 * - none → `claimed`, generation 0;
 * - `completed` → `reused`, unless another run finished it and it was bought ({@link Receipt.boughtAt}) before the
 *   item's `staleBefore` (or, an item without
 *   one, `refresh` is set): `claimed`, generation + 1 (the run that finished it reuses it whatever its age: a
 *   redispatch or a replay of the call never pays again; a refresh carries its run's start as `staleBefore`, so a
 *   result another run bought since, its own dead attempt's taken over say, is reused too);
 * - `running` → `claimed` (same generation) for its owner, a newer attempt of its run, anyone once
 *   the lease has passed, or a caller asking to `takeover`; else `running` with its owner;
 * - `failed` → retryable: `claimed` (same generation); else like `completed` but `failed` with the error.
 * A claim of a generation that another attempt claimed and did not complete says `takeover: true`, as does its
 * owner's claim of it still `running` (left so by an earlier invocation of the attempt).
 */
export function decideClaim(
  existing: Receipt | undefined,
  item: ClaimReceiptsRequest["items"][number],
  request: ClaimReceiptsRequest,
  now: number,
): { result: StoredReceiptClaim; next?: Receipt } {
  const { attempt } = request;
  // Another attempt claimed this generation and never completed it: it may have reached the provider. So may this
  // attempt, claiming again what it left running: an attempt claims a call once an invocation, so its earlier
  // invocation wound down or died with the request's end unknown (sent, or a takeover not yet resolved).
  const takeover =
    existing !== undefined &&
    existing.status !== "completed" &&
    (existing.owner.attemptId !== attempt.attemptId || existing.status === "running");
  // The request it was claimed for may have been sent, and nothing says how it ended: left running, expired or
  // released, or failed so (claimed again under `retryUnknown`).
  const unknown =
    existing !== undefined && (existing.status === "running" || isRecoveryMarker(existing) || existing.error?.code === OUTCOME_UNKNOWN);
  const own = (generation: number): { result: StoredReceiptClaim; next: Receipt } => {
    const answering = maybeAnswering(existing, generation, takeover && unknown);
    // Answered by the request of a claim whose end is unknown (this one's, or one taken over before that can still
    // answer after a known failure since), the result is as old as that one.
    const sent = existing !== undefined && generation === existing.generation && (unknown || answering.length > 0);
    return claimedAs(generation, answering, sent ? existing.boughtAt : now);
  };
  const claimedAs = (generation: number, answering: string[], boughtAt: number): { result: StoredReceiptClaim; next: Receipt } => ({
    result:
      takeover && generation === existing?.generation
        ? { key: item.key, disposition: "claimed", generation, takeover: true, ...(unknown ? { unknownOutcome: true as const } : {}) }
        : { key: item.key, disposition: "claimed", generation },
    next: {
      key: item.key,
      toolId: existing?.toolId ?? item.toolId,
      status: "running",
      generation,
      owner: attempt,
      leaseExpiresAt: now + request.leaseTtlMs,
      output: null,
      error: null,
      retryable: false,
      finishedByRun: null,
      createdAt: existing?.createdAt ?? now,
      updatedAt: now,
      unknownFrom: answering,
      boughtAt,
    } satisfies Receipt,
  });
  if (!existing) return own(0);
  const stale = item.staleBefore !== undefined && existing.status !== "running" && existing.boughtAt < item.staleBefore;
  const rebill = (stale || (request.refresh && item.staleBefore === undefined)) && existing.finishedByRun !== attempt.runId;
  switch (existing.status) {
    case "completed":
      if (rebill) return own(existing.generation + 1);
      return {
        result: {
          key: item.key,
          disposition: "reused",
          output: existing.output,
          generation: existing.generation,
          finishedByRun: existing.finishedByRun,
        },
      };
    case "failed":
      if (existing.retryable) return own(existing.generation);
      // Sent again only when the run asks (`retryUnknown`): the provider may have executed it once already.
      if (existing.error?.code === OUTCOME_UNKNOWN && request.retryUnknown === true) return own(existing.generation);
      if (rebill) return own(existing.generation + 1);
      // The schema's CHECK guarantees a failed receipt has an error code.
      return { result: { key: item.key, disposition: "failed", error: existing.error ?? { code: "unknown", message: "" } } };
    case "running": {
      const owner = existing.owner;
      const leaseExpiresAt = existing.leaseExpiresAt ?? now;
      const newerAttemptOfRun = owner.runId === attempt.runId && owner.attemptSeq < attempt.attemptSeq;
      if (owner.attemptId === attempt.attemptId || newerAttemptOfRun || leaseExpiresAt <= now || item.takeover === true) {
        return own(existing.generation);
      }
      return { result: { key: item.key, disposition: "running", owner, leaseExpiresAt } };
    }
  }
}
