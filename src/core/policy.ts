/**
 * Runtime policy: the knobs of leases, chunking, concurrency and budgets.
 * Production defaults; the test runner (TROUPE_TEST_MODE) shortens waits so
 * the suite runs in seconds, and lets one run override a few of them
 * (`testPolicy` on `POST /v1/runs`, refused outside the test runner).
 */
import { z } from "zod";

export interface RuntimePolicy {
  /**
   * The fewest shards a new dataset gets; {@link shardCountFor} adds more for a
   * large first run. The count is recorded with the dataset; later changes do not move rows.
   */
  sheetShards: number;
  /** Rows of a new dataset's first run per shard, past `sheetShards` of them (see {@link shardCountFor}). */
  sheetRowsPerShard: number;
  /** The most shards {@link shardCountFor} gives a dataset. */
  maxSheetShards: number;
  /** Receipt shards per org. Fixed for the life of the deployment: keys route by it. */
  receiptShards: number;
  /** Rows per chunk (a chunk costs about one RPC per shard per phase). */
  chunkRows: number;
  /**
   * A map of few rows is cut into at least this many chunks, down to
   * {@link MIN_SPREAD_CHUNK_ROWS} rows each (see {@link chunkRowsFor}); 0: never.
   */
  spreadChunks: number;
  /** Chunks in flight at once per map. */
  chunkConcurrency: number;
  /** Rows of one chunk computed at once. */
  rowConcurrency: number;
  /** Row and receipt leases: the durable deadline of an attempt, expired by the shards' alarms. */
  rowLeaseTtlMs: number;
  receiptLeaseTtlMs: number;
  /**
   * How often a chunk attempt renews its leases (in bulk, one call per shard).
   * An in-invocation timer paces it; the durable deadline stays the lease expiry.
   */
  heartbeatIntervalMs: number;
  /** How long a call waits on a receipt another live attempt is running. */
  receiptWaitMs: number;
  /**
   * Bulk receipt operations go out when every row of the chunk waits on one,
   * or after this long: one call per shard per phase.
   */
  receiptMaxWaitMs: number;
  /**
   * How long they may wait in all while the attempt has requests enough
   * ready to keep its connections busy (src/core/bulk-queue.ts `hold`).
   */
  receiptHoldMs: number;
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
   * Past the grace, how long they may go on waiting while other calls of
   * their attempt are still on their way (each may join when it returns):
   * at most a quarter of the row and receipt leases.
   */
  batchHoldMs: number;
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
  /**
   * Rounds of reads one part of a dataset export makes, in an invocation of its own (`DatasetExporter`): each round
   * at most a call per shard, 8,000 rows and 16 MiB of their data.
   */
  exportPartRounds: number;
  /** Times a chunk is retried while its rows are blocked by another run's leases. */
  blockedRetries: number;
  /** Times a chunk whose attempt died (lost its leases, threw) is redispatched before the run fails. */
  maxChunkRedispatches: number;
  /** Invocations in a row that may die with chunks in flight before the run fails `crash_loop`. */
  maxInterruptedInvocations: number;
  /** Times finalize sends chunks with unpersisted rows back before the map fails with exact counts. */
  reconcileRepairs: number;
  /** Coalescing window of `map.progress` events. */
  progressIntervalMs: number;
  /**
   * Executors a map starts with, before its providers' pace and latency are
   * known (runtime/executor/sizing.ts); and the most one run's map uses at
   * once. `maxExecutors: 0` runs every chunk attempt in the coordinator.
   */
  minExecutors: number;
  maxExecutors: number;
  /** The most executors all the runs of one org use at once (each running map keeps at least one). */
  maxExecutorsPerOrg: number;
  /** Wall clock one coordinator invocation may spend dispatching before it yields (an alarm runs 15 minutes at most). */
  invocationWallMs: number;
  /** After a cancel, how long an executor's last report (its bills) is awaited before the run settles. */
  executorStopWaitMs: number;
  /**
   * An executor invocation whose subrequests pass this many, or whose wall
   * clock passes this long, winds its running attempts down: no request is
   * sent any more, those in flight are answered, the rows computed are
   * persisted and the rest go on in a fresh invocation (MapExecutor). What is
   * left below the platform's 10,000 subrequests and 15 minutes covers them.
   */
  executorWindDownSubrequests: number;
  executorWindDownMs: number;
  /**
   * Wall clock after which a coordinator invocation winds down the attempts
   * its executors still run for it (they store what they computed and hand
   * back the rows they left) and yields: an executor's attempt outlives the
   * executor's invocations (it winds down and goes on), but the coordinator's
   * alarm, which waits for it, runs 15 minutes at most.
   */
  coordinatorWindDownMs: number;
  /**
   * What a map's capture source may weigh, serialized, to be sent to
   * executors (runtime/executor/capture-sources.ts): 32 MiB, what one call
   * carries, less room for the run's record and policy sent with it. A source
   * past it runs its map in the coordinator from the start.
   */
  sourceBudgetBytes: number;
}

const production: RuntimePolicy = {
  sheetShards: 4,
  // A shard is one object: 250,000 rows of a few KB, each with a few versions, stay
  // far below its 10 GB, while every chunk costs one call per shard it touches, so
  // a dataset has no more shards than its size needs: 4 up to 1M rows, 40 at 10M.
  sheetRowsPerShard: 250_000,
  maxSheetShards: 64,
  // Two: every bulk receipt call costs one RPC per shard, and one shard takes
  // thousands of keys a second in batches; more shards only add calls per chunk.
  receiptShards: 2,
  // A chunk is one executor's attempt: small enough that a run has chunks for every executor its providers need
  // (2,000 rows are 20 chunks), large enough that its bulk calls stay few per row.
  chunkRows: 100,
  // Two chunks for each of the most executors a map may have: a map's last round of chunks leaves executors idle
  // while the others finish, so the more rounds, the shorter that tail (a 5,900-row map at 2 s latency: 66% of the
  // provider's rate in chunks of 100, 80% in chunks of 50). From 12,800 rows on, chunks are 100 rows again.
  spreadChunks: 128,
  chunkConcurrency: 4,
  rowConcurrency: 400,
  rowLeaseTtlMs: 5 * 60_000,
  receiptLeaseTtlMs: 5 * 60_000,
  heartbeatIntervalMs: 60_000,
  receiptWaitMs: 30_000,
  receiptMaxWaitMs: 200,
  // A row goes on (or counts as done) only once its answer is stored, so this is how late a row may count after its
  // last call: "within about a second". 4 s took receipt writes from 0.87 to 0.52 per row at 2 s at the same
  // throughput, but a row whose last call is not batchable then counted up to 4 s after it.
  receiptHoldMs: 1_000,
  providerAttempts: 4,
  rateLimitAttempts: 10,
  providerRetryBaseMs: 250,
  providerRetryMaxMs: 5_000,
  providerTimeoutMs: 120_000,
  runRetryBudget: 5_000,
  batchGraceMs: 250,
  // A chunk's rows call the batchable tool as their earlier calls return: at 2 s latency an executor's six
  // connections return about three a second, so a 250 ms window sent batches of one to five (1.23 requests per
  // demo-enrich row, where 1.02 is a batch of 50). Bounded, as the rows in a batch count as done only when it
  // returns: at 2 s a 50-row chunk's finds take about 17 s, so its verifications go in two batches, and its rows
  // count in two steps rather than one at its end (30 s: one batch, 1.02 requests per row).
  batchHoldMs: 10_000,
  dispatchWaveSize: 100,
  completionRetryDelaysMs: [1_000, 3_000, 9_000],
  salvageRestoreRetryMs: [1_000, 5_000, 30_000, 120_000, 600_000],
  invocationSubrequestBudget: 8_000,
  // At most 64,000 rows and 128 MiB of data per part: a few seconds of CPU to write, at most 512 calls.
  exportPartRounds: 8,
  blockedRetries: 10,
  maxChunkRedispatches: 8,
  maxInterruptedInvocations: 10,
  reconcileRepairs: 2,
  progressIntervalMs: 500,
  minExecutors: 4,
  maxExecutors: 64,
  maxExecutorsPerOrg: 256,
  invocationWallMs: 10 * 60_000,
  executorStopWaitMs: 10_000,
  // 2,000 subrequests and 3 minutes left: the requests in flight (each stopped by providerTimeoutMs), their receipts,
  // the rows' persist and the reports.
  executorWindDownSubrequests: 8_000,
  executorWindDownMs: 12 * 60_000,
  // As the executors: 3 minutes for the attempts to stop sending, store their rows and report.
  coordinatorWindDownMs: 12 * 60_000,
  sourceBudgetBytes: 30 * 1024 * 1024,
};

const test: Partial<RuntimePolicy> = {
  chunkRows: 50,
  // Tests count on chunks of exactly `chunkRows`.
  spreadChunks: 0,
  rowLeaseTtlMs: 3_000,
  receiptLeaseTtlMs: 3_000,
  heartbeatIntervalMs: 750,
  receiptWaitMs: 1_000,
  providerRetryBaseMs: 10,
  providerRetryMaxMs: 100,
  dispatchWaveSize: 25,
  completionRetryDelaysMs: [10, 30, 90],
  salvageRestoreRetryMs: [50, 100, 200],
  blockedRetries: 5,
  maxInterruptedInvocations: 3,
  progressIntervalMs: 100,
  // Small enough that a few-hundred-row run yields and replays across several invocations.
  invocationSubrequestBudget: 400,
  // Every export of more than one round of pages is written in several parts.
  exportPartRounds: 1,
  maxExecutors: 8,
  invocationWallMs: 60_000,
  executorStopWaitMs: 3_000,
};

/**
 * What one run may override under the test runner, so a chaos test can make
 * leases expire, heartbeats stall or blocked retries run out in seconds.
 * A heartbeat interval longer than the lease lets leases lapse on purpose.
 */
export const TestPolicyOverrides = z
  .object({
    rowLeaseTtlMs: z.number().int().min(50).max(600_000),
    receiptLeaseTtlMs: z.number().int().min(50).max(600_000),
    heartbeatIntervalMs: z.number().int().min(10).max(600_000),
    batchGraceMs: z.number().int().min(0).max(10_000),
    batchHoldMs: z.number().int().min(0).max(600_000),
    receiptWaitMs: z.number().int().min(0).max(600_000),
    /** How long receipt writes may be held while requests wait (a test makes them wait on work alone, not on time). */
    receiptHoldMs: z.number().int().min(0).max(600_000),
    blockedRetries: z.number().int().min(0).max(100),
    /** A provider that answers slower than this has its request stopped and retried (a test's provider hangs for less than a second). */
    providerTimeoutMs: z.number().int().min(50).max(600_000),
    maxChunkRedispatches: z.number().int().min(0).max(100),
    chunkRows: z.number().int().min(1).max(1000),
    /** Billed-but-unpersisted calls per map (25 under the test runner; production's 100 lets a test's receipts wait for company). */
    dispatchWaveSize: z.number().int().min(1).max(10_000),
    /** Subrequests one coordinator invocation spends before it yields (a test makes a run span invocations). */
    invocationSubrequestBudget: z.number().int().min(5).max(8_000),
    /** Subrequests, or wall clock, after which an executor invocation's running attempts go on in a fresh one. */
    executorWindDownSubrequests: z.number().int().min(5).max(8_000),
    executorWindDownMs: z
      .number()
      .int()
      .min(100)
      .max(12 * 60_000),
    /** Wall clock after which a coordinator invocation has its executors wind their attempts down, and yields. */
    coordinatorWindDownMs: z
      .number()
      .int()
      .min(100)
      .max(12 * 60_000),
    /** Invocations in a row that may die with chunks in flight before the run fails `crash_loop` (each waits out the platform's alarm retry backoff). */
    maxInterruptedInvocations: z.number().int().min(1).max(100),
    /** 0: the run's chunk attempts run in its coordinator, not in executors. */
    maxExecutors: z.number().int().min(0).max(64),
    minExecutors: z.number().int().min(1).max(64),
    maxExecutorsPerOrg: z.number().int().min(1).max(1000),
    /** How often a map's progress (and the chunks it completed) goes to the ledger: a test holds its events back. */
    progressIntervalMs: z.number().int().min(10).max(600_000),
    /** Lets a few hundred rows spread over many shards, as millions would. */
    sheetRowsPerShard: z.number().int().min(1).max(10_000_000),
    /** Past 32 MiB, a test lets executors ask for a source the platform then refuses to carry (the fallback). */
    sourceBudgetBytes: z
      .number()
      .int()
      .min(1)
      .max(2 ** 30),
    /** How often a parent asks a child it has not heard from (a {@link import("../runtime/invocation/waits").WaitPolicy} knob). */
    childCheckIntervalMs: z
      .number()
      .int()
      .min(100)
      .max(24 * 3600 * 1000),
  })
  .partial()
  .strict();
export type TestPolicyOverrides = z.infer<typeof TestPolicyOverrides>;

/**
 * The policy of a run: production, or under the test runner the test policy
 * with the run's own overrides on top (ignored outside the test runner).
 */
export function policyFor(env: Env, overrides?: Record<string, number> | null): RuntimePolicy {
  if (env.TROUPE_TEST_MODE !== "on") return production;
  const own = overrides ? TestPolicyOverrides.parse(overrides) : {};
  return { ...production, ...test, ...own };
}

/**
 * The shard count of a new dataset whose first run maps `totalRows` rows: one
 * shard per `sheetRowsPerShard` rows, at least `sheetShards` and at most
 * `maxSheetShards` (but never below `sheetShards`). The dataset keeps it: a
 * later, larger run of the same dataset reuses the recorded count.
 *
 * @example
 * shardCountFor(2_000_000, policy); // 8 under the production policy
 */
export function shardCountFor(
  totalRows: number,
  policy: Pick<RuntimePolicy, "sheetShards" | "sheetRowsPerShard" | "maxSheetShards">,
): number {
  const bySize = Math.ceil(Math.max(0, totalRows) / policy.sheetRowsPerShard);
  return Math.max(policy.sheetShards, Math.min(policy.maxSheetShards, bySize));
}

/** The most chunks a map is planned in: past it, chunks grow (a 10,000,000-row upload is 10,000 chunks of 1,000). */
export const MAX_MAP_CHUNKS = 10_000;

/** The most rows in one chunk (an upload's index places every 100th to every 1,600th row: src/uploads/limits.ts). */
export const MAX_CHUNK_ROWS = 1_000;

/** The fewest rows {@link RuntimePolicy.spreadChunks} cuts a chunk to: smaller ones cost more calls per row than their tail saves. */
export const MIN_SPREAD_CHUNK_ROWS = 50;

/**
 * Rows per chunk of a map of `totalRows`: the policy's `chunkRows`; fewer
 * when that would make under `spreadChunks` chunks (down to
 * {@link MIN_SPREAD_CHUNK_ROWS}); more when it would make over
 * {@link MAX_MAP_CHUNKS} (the coordinator keeps a record of each), up to
 * {@link MAX_CHUNK_ROWS}.
 *
 * @example
 * chunkRowsFor(5_900, policy); // 50 under the production policy
 * chunkRowsFor(1_000_000, policy); // 100
 * chunkRowsFor(10_000_000, policy); // 1,000
 */
export function chunkRowsFor(totalRows: number, policy: Pick<RuntimePolicy, "chunkRows" | "spreadChunks">): number {
  const large = Math.ceil(totalRows / MAX_MAP_CHUNKS);
  if (large > policy.chunkRows) return Math.min(MAX_CHUNK_ROWS, large);
  if (policy.spreadChunks <= 0) return policy.chunkRows;
  const spread = Math.max(MIN_SPREAD_CHUNK_ROWS, Math.ceil(totalRows / policy.spreadChunks));
  return Math.min(policy.chunkRows, spread);
}
