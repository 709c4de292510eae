/**
 * Runtime policy: the knobs of leases, chunking, concurrency and budgets.
 * Production defaults; the test runner (TROUPE_TEST_MODE) shortens waits so
 * the suite runs in seconds.
 */
export interface RuntimePolicy {
  /** Shards of a new dataset (recorded with the dataset; later changes do not move rows). */
  sheetShards: number;
  /** Receipt shards per org. Fixed for the life of the deployment: keys route by it. */
  receiptShards: number;
  /** Rows per chunk (a chunk costs about one RPC per shard per phase). */
  chunkRows: number;
  /** Chunks in flight at once per map. */
  chunkConcurrency: number;
  /** Rows of one chunk computed at once. */
  rowConcurrency: number;
  rowLeaseTtlMs: number;
  receiptLeaseTtlMs: number;
  /** How long a call waits on a receipt another live attempt is running. */
  receiptWaitMs: number;
  /**
   * Bulk receipt operations go out when every row of the chunk waits on one,
   * or after this long: one call per shard per phase.
   */
  receiptMaxWaitMs: number;
  /** In-process attempts of a retryable provider failure (the first included). */
  providerAttempts: number;
  /** In-process attempts of a call answered 429. */
  rateLimitAttempts: number;
  providerRetryBaseMs: number;
  providerRetryMaxMs: number;
  /**
   * A provider request still unanswered after this long is aborted (and
   * retried). Cancelling a run never aborts a request already sent: its
   * result is billed, so it is stored.
   */
  providerTimeoutMs: number;
  /** In-process provider retries one run may spend, over all its invocations. */
  runRetryBudget: number;
  /** How long calls of a batchable tool wait for company before their batch goes out. */
  batchGraceMs: number;
  /**
   * Bounded dispatch waves: provider calls (batch members counted) billed and
   * not yet persisted at once, per map. What a broken store can cost.
   */
  dispatchWaveSize: number;
  /** The receipt completion ladder: waits before each retry of a failed completion. */
  completionRetryDelaysMs: readonly number[];
  /** A finished run's alarm retries writing its salvage into receipts after these waits (the last repeats). */
  salvageRestoreRetryMs: readonly number[];
  /** Subrequests one coordinator invocation may spend before it yields (platform cap: 10,000). */
  invocationSubrequestBudget: number;
  /** Times a chunk is retried while its rows are blocked by another run's leases. */
  blockedRetries: number;
  /** Coalescing window of `map.progress` events. */
  progressIntervalMs: number;
}

const production: RuntimePolicy = {
  sheetShards: 4,
  receiptShards: 4,
  chunkRows: 400,
  chunkConcurrency: 4,
  rowConcurrency: 400,
  rowLeaseTtlMs: 5 * 60_000,
  receiptLeaseTtlMs: 5 * 60_000,
  receiptWaitMs: 30_000,
  receiptMaxWaitMs: 200,
  providerAttempts: 4,
  rateLimitAttempts: 10,
  providerRetryBaseMs: 250,
  providerRetryMaxMs: 5_000,
  providerTimeoutMs: 120_000,
  runRetryBudget: 5_000,
  batchGraceMs: 250,
  dispatchWaveSize: 100,
  completionRetryDelaysMs: [1_000, 3_000, 9_000],
  salvageRestoreRetryMs: [1_000, 5_000, 30_000, 120_000, 600_000],
  invocationSubrequestBudget: 8_000,
  blockedRetries: 10,
  progressIntervalMs: 500,
};

const test: Partial<RuntimePolicy> = {
  chunkRows: 50,
  rowLeaseTtlMs: 3_000,
  receiptLeaseTtlMs: 3_000,
  receiptWaitMs: 1_000,
  providerRetryBaseMs: 10,
  providerRetryMaxMs: 100,
  dispatchWaveSize: 25,
  completionRetryDelaysMs: [10, 30, 90],
  salvageRestoreRetryMs: [50, 100, 200],
  blockedRetries: 5,
  progressIntervalMs: 100,
  // Small enough that a few-hundred-row run yields and replays across several invocations.
  invocationSubrequestBudget: 400,
};

export function policyFor(env: Env): RuntimePolicy {
  return env.TROUPE_TEST_MODE === "on" ? { ...production, ...test } : production;
}
