/**
 * The RPC contracts of the storage actors (SheetShard, ReceiptShard): what a
 * caller sends and what it gets back. Inputs are validated by the receiving
 * actor (a trust boundary); results are plain JSON-able data.
 */
import { z } from "zod";

/** Who is writing: one chunk attempt of one run, fenced by the run's attempt epoch. */
export const AttemptRef = z.object({
  attemptId: z.string().min(1).max(200),
  runId: z.string().min(1).max(100),
  attemptSeq: z.number().int().nonnegative(),
});
export type AttemptRef = z.infer<typeof AttemptRef>;

const Key = z.string().min(1).max(512);
const Json = z.unknown();
const LeaseTtlMs = z
  .number()
  .int()
  .positive()
  .max(24 * 3600 * 1000);

// ---------------------------------------------------------------- SheetShard

export const ClaimRowsRequest = z.object({
  attempt: AttemptRef,
  leaseTtlMs: LeaseTtlMs,
  /** `force`: rows completed by another run are recomputed instead of reused. */
  recompute: z.boolean(),
  rows: z.array(z.object({ key: Key, index: z.number().int().nonnegative(), input: Json })).max(1000),
  /** Records only the rows that are reused; the others are answered as they stand and left alone (no lease, no version). */
  reuseOnly: z.boolean().optional(),
});
export type ClaimRowsRequest = z.infer<typeof ClaimRowsRequest>;

export type ClaimedRow =
  | { key: string; status: "pending" }
  /**
   * Done: the run's view holds its completed version (read with the run's rows, not sent back here). `own`: this
   * run wrote it (an earlier attempt or pass of the chunk computed it), so it counts computed, not reused.
   */
  | { key: string; status: "completed"; own?: true }
  /** The run's view holds its failed version already (the chunk was claimed again): counted failed, not computed again. */
  | { key: string; status: "failed"; error: string | null }
  | { key: string; status: "blocked"; owner: AttemptRef; leaseExpiresAt: number }
  /**
   * The attempt's epoch is over: an attempt of a newer epoch of its run has
   * claimed at this shard (the coordinator gave this one up and redispatched
   * its chunk). Nothing was claimed or recorded; the attempt must stop.
   */
  | { key: string; status: "fenced"; newerSeq: number };

export const PersistRowsRequest = z.object({
  attempt: AttemptRef,
  rows: z
    .array(
      z.object({
        key: Key,
        status: z.enum(["completed", "failed"]),
        data: z.record(z.string(), Json),
        error: z.string().max(8192).nullable(),
      }),
    )
    .max(1000),
});
export type PersistRowsRequest = z.infer<typeof PersistRowsRequest>;
export interface PersistRowsResult {
  /** Keys now terminal and written by this attempt (including idempotent repeats). */
  written: string[];
  /** Keys this attempt no longer owns: nothing was written for them. */
  rejected: string[];
}

export const LeaseRequest = z.object({
  attempt: AttemptRef,
  keys: z.array(Key).max(5000),
  leaseTtlMs: LeaseTtlMs,
});
export type LeaseRequest = z.infer<typeof LeaseRequest>;
export interface LeaseResult {
  renewed: string[];
  /** Keys whose lease this attempt no longer holds. */
  lost: string[];
}

export const ReleaseRequest = z.object({ runId: z.string().min(1).max(100) });
export type ReleaseRequest = z.infer<typeof ReleaseRequest>;

/** A sheet shard's release may also fence: from then on, claims of the run's epochs before `fenceBelow` are refused. */
export const SheetReleaseRequest = ReleaseRequest.extend({ fenceBelow: z.number().int().nonnegative().optional() });
export type SheetReleaseRequest = z.infer<typeof SheetReleaseRequest>;

/** `peekRows`: which rows a run would reuse now, without claiming anything (estimates). */
export const PeekRowsRequest = z.object({
  /** `force`: nothing is reused. */
  recompute: z.boolean(),
  rows: z.array(z.object({ key: Key, input: Json })).max(1000),
});
export type PeekRowsRequest = z.infer<typeof PeekRowsRequest>;

/** Most rows one `readRunRows` returns. */
export const MAX_READ_ROWS = 1000;
/**
 * Most characters of row data one `readRunRows` returns past its first row
 * (the default and the most asked): an answer of a thousand rows of 40 KB
 * would be past the 32 MiB an RPC may carry. A row holds at most 1 MiB.
 */
export const MAX_READ_CHARS = 8 * 1024 * 1024;

/**
 * `readRunRows`: the run's rows with input index in [fromIndex, toIndex), in
 * index order, the first `limit` of them (a keyset read: its cost is the rows
 * it returns, however deep `fromIndex` is).
 */
export const ReadRunRowsRequest = z.object({
  runId: z.string().min(1).max(100),
  /** Inclusive lower bound of the run's input index. */
  fromIndex: z.number().int().nonnegative(),
  /** Exclusive upper bound. */
  toIndex: z.number().int().nonnegative(),
  /** At most this many rows (default and most: MAX_READ_ROWS). */
  limit: z.number().int().min(1).max(MAX_READ_ROWS).optional(),
  /** At most this many characters of row data past the first row (default and most: MAX_READ_CHARS). */
  maxChars: z.number().int().min(1).max(MAX_READ_CHARS).optional(),
});
export type ReadRunRowsRequest = z.infer<typeof ReadRunRowsRequest>;

/** A shard's answer to `readRunRows`: `cut` when its size budget ended it before its limit and its range. */
export interface RunRowsRead {
  rows: SheetRow[];
  cut: boolean;
}

/** One row of a run's view of a dataset. */
export interface SheetRow {
  index: number;
  key: string;
  status: "pending" | "completed" | "failed";
  data: Record<string, unknown>;
  error: string | null;
}

// -------------------------------------------------------------- ReceiptShard

export const ReceiptError = z.object({ code: z.string().max(100), message: z.string().max(8192) });
export type ReceiptError = z.infer<typeof ReceiptError>;

export const ClaimReceiptsRequest = z.object({
  attempt: AttemptRef,
  leaseTtlMs: LeaseTtlMs,
  /** `forceToolRefresh`: receipts finished by another run are claimed again (a deliberate re-bill). */
  refresh: z.boolean(),
  /** `retryUnknown`: receipts failed `outcome_unknown` are claimed again (their request is sent again). */
  retryUnknown: z.boolean().optional(),
  items: z
    .array(
      z.object({
        key: Key,
        toolId: z.string().min(1).max(200),
        /**
         * Take a `running` receipt over from its owner (same generation): the
         * caller found the owner dead, or waited for it long enough.
         */
        takeover: z.boolean().optional(),
        /**
         * The call's `staleAfterSeconds` as a time (ms): a result another run
         * finished before it is not reused (claimed again, generation + 1).
         * Reckoned from the run's start, so a run's verdict on a result
         * stays the same for its whole life (a replay reuses what it reused).
         */
        staleBefore: z.number().finite().min(0).optional(),
      }),
    )
    .max(1000),
});
export type ClaimReceiptsRequest = z.infer<typeof ClaimReceiptsRequest>;

export type ReceiptClaim =
  /**
   * This attempt owns the call now: execute it. `generation` counts deliberate
   * re-bills. `takeover` (absent when false) says another attempt had claimed
   * this generation and did not complete it: the provider may already hold its
   * result under the same idempotency key, so ask (`ToolDefinition.recover`)
   * before calling again. `unknownOutcome` (with `takeover`) says that
   * attempt left it running (it may have sent the request, and nothing says
   * how it ended), as opposed to a failure the provider answered.
   */
  | { key: string; disposition: "claimed"; generation: number; takeover?: true; unknownOutcome?: true }
  /**
   * Completed: its output, the generation that billed it and the run whose
   * attempt completed it (that run's spend holds the bill).
   */
  | { key: string; disposition: "reused"; output: unknown; generation: number; finishedByRun: string | null }
  | { key: string; disposition: "running"; owner: AttemptRef; leaseExpiresAt: number }
  | { key: string; disposition: "failed"; error: ReceiptError };

export const CompleteReceiptsRequest = z.object({
  attempt: AttemptRef,
  items: z.array(z.object({ key: Key, output: Json })).max(1000),
});
export type CompleteReceiptsRequest = z.infer<typeof CompleteReceiptsRequest>;

export const FailReceiptsRequest = z.object({
  attempt: AttemptRef,
  items: z.array(z.object({ key: Key, error: ReceiptError, retryable: z.boolean() })).max(1000),
});
export type FailReceiptsRequest = z.infer<typeof FailReceiptsRequest>;

/**
 * An attempt's completions, failures and claims on one shard, written in one
 * call and one transaction, in that order: the receipts a chunk's rows finish
 * and those they start next (a row's verify after its find) go together.
 * Claims come as one group per `refresh` value.
 */
export const WriteReceiptsRequest = z.object({
  attempt: AttemptRef,
  complete: CompleteReceiptsRequest.shape.items,
  fail: FailReceiptsRequest.shape.items,
  claims: z.array(ClaimReceiptsRequest.omit({ attempt: true })).max(2),
});
export type WriteReceiptsRequest = z.infer<typeof WriteReceiptsRequest>;

/**
 * Characters of row data or receipt outputs (as JSON) one shard call carries
 * at most, past its first item, both ways: an RPC carries 32 MiB, and rows of
 * 256 KiB, inputs of 64 KiB or outputs of 512 KiB by the hundred pass it. A
 * request is sent in pages of it; a `write` or `peek` answer stops before the
 * output that would pass it, and the caller asks again for the rest.
 */
export const RPC_PAGE_CHARS = 8 * 1024 * 1024;

/** What a receipt output takes of an RPC_PAGE_CHARS page: its length as JSON. */
export function outputChars(output: unknown): number {
  return JSON.stringify(output ?? null).length;
}

/**
 * One result per part of a {@link WriteReceiptsRequest}: `claims` in the request's groups and order. A shard's
 * answer may claim only the first items (of the first groups): past RPC_PAGE_CHARS of reused outputs it
 * stops, the items after it unclaimed, to be sent again (`ReceiptClient.write` does).
 */
export interface WriteReceiptsResult<Claim = ReceiptClaim> {
  completed: ReceiptWriteResult;
  failed: ReceiptWriteResult;
  claims: Claim[][];
}

export interface ReceiptWriteResult {
  /** Keys written (or already in that state by this attempt: a repeat is harmless). */
  accepted: string[];
  /** Keys this attempt does not own: nothing was written for them. */
  rejected: string[];
}

/**
 * What an estimate needs of a receipt: a claim would reuse its output, or
 * answer its permanent failure (neither bills), or send a new request.
 */
/** A receipt as a claim would find it now; `boughtAt` (ms, Receipt.boughtAt) says how old its result is (`staleAfterSeconds`). */
export type PeekedReceipt =
  | { key: string; state: "reused"; output: unknown; boughtAt: number }
  | { key: string; state: "failed"; boughtAt: number }
  /** Failed `outcome_unknown`: the request may have reached the provider; a claim sends it again only under `retryUnknown`. */
  | { key: string; state: "unknown"; boughtAt: number }
  | { key: string; state: "new" };

/** A map's input row with its key and its place in the run's view of the dataset. */
export interface PlannedRow {
  key: string;
  /** Position in the run's view of the dataset (dense, after dropping duplicates; in an upload, the row's place in the file). */
  index: number;
  input: Record<string, unknown>;
  /** Set for a row read from an upload that does not fit the play's row schema: it fails with this error, uncomputed. */
  invalid?: string;
}

/** Rows `[from, to)` of an upload, as a chunk attempt reads them (runtime/map/upload-rows.ts). */
export interface UploadSlice {
  upload: string;
  from: number;
  to: number;
}

/** A billed output whose receipt could not be completed. */
export interface SalvageEntry {
  receiptKey: string;
  toolId: string;
  /** The attempt that claimed the receipt: the one allowed to complete it later. */
  attempt: AttemptRef;
  /** Exactly what the receipt would have stored. */
  output: unknown;
  /** Completion attempts made (the first included). */
  completeAttempts: number;
  error: string;
  at: number;
}

// ---- sheet shards: datasets and a run's counts

export const EnsureDatasetRequest = z.object({ shardCount: z.number().int().min(1).max(256) });
export type EnsureDatasetRequest = z.infer<typeof EnsureDatasetRequest>;

export const CountRunRowsRequest = z.object({ runId: z.string().min(1).max(100) });
export type CountRunRowsRequest = z.infer<typeof CountRunRowsRequest>;

/** `countRunChunks`: a run's rows counted per chunk of `chunkRows` input positions. */
export const CountRunChunksRequest = z.object({ runId: z.string().min(1).max(100), chunkRows: z.number().int().min(1).max(100_000) });
export type CountRunChunksRequest = z.infer<typeof CountRunChunksRequest>;

/** Most of a run's rows one `runColumns` call reads (at most MAX_READ_CHARS of their data, as a read carries). */
export const MAX_COLUMN_SCAN_ROWS = 50_000;

/**
 * `runColumns`: the fields of the run's rows from input index `fromIndex` on,
 * scanning at most `limit` of them and `maxChars` of their data (at least one
 * row): the fields of a dataset are found in a call per 8 MiB of its rows,
 * where reading the rows themselves took one call per few hundred.
 */
export const RunColumnsRequest = z.object({
  runId: z.string().min(1).max(100),
  fromIndex: z.number().int().nonnegative(),
  limit: z.number().int().min(1).max(MAX_COLUMN_SCAN_ROWS).optional(),
  maxChars: z.number().int().min(1).max(MAX_READ_CHARS).optional(),
});
export type RunColumnsRequest = z.infer<typeof RunColumnsRequest>;

/**
 * Most fields a run's rows may have in all for an export (a spreadsheet's own
 * limit), and most characters of their names: a shard answers one more at most.
 */
export const MAX_RUN_COLUMNS = 16_384;
export const MAX_RUN_COLUMN_CHARS = 1024 * 1024;

/** A field of a run's rows: the input index of the first row scanned that has it, and where it stands in that row. */
export interface RunColumn {
  name: string;
  index: number;
  position: number;
}

/** A shard's answer to `runColumns`: the fields it saw, and where the next scan starts (null: no row left). */
export interface RunColumnsScan {
  columns: RunColumn[];
  nextIndex: number | null;
}

/** A run's rows in this shard whose input index falls in one chunk (`floor(index / chunkRows)`), by status. */
export type RunChunkCounts = {
  chunk: number;
  total: number;
  completed: number;
  failed: number;
};

/** A run's membership in this shard, by row status. */
export interface RunRowCounts {
  total: number;
  completed: number;
  failed: number;
  pending: number;
}
