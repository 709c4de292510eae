/** The receipt shard's SQLite schema (see receipt-store.ts for what it holds). */

/** Ordered schema migrations of a ReceiptShard; apply with `migrate()`. */
export const RECEIPT_MIGRATIONS: readonly string[] = [
  `CREATE TABLE receipts (
     key TEXT PRIMARY KEY, tool_id TEXT NOT NULL,
     status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
     output TEXT, error_code TEXT, error_message TEXT, retryable INTEGER NOT NULL DEFAULT 0,
     generation INTEGER NOT NULL DEFAULT 0,
     owner_run_id TEXT NOT NULL, owner_attempt_id TEXT NOT NULL, owner_seq INTEGER NOT NULL,
     lease_expires_at INTEGER, finished_by_run TEXT,
     created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
     CHECK (status <> 'running' OR lease_expires_at IS NOT NULL),
     CHECK (status <> 'failed' OR error_code IS NOT NULL)
   ) WITHOUT ROWID;
   CREATE INDEX receipts_by_lease ON receipts (status, lease_expires_at);`,
  // Only running receipts need finding by lease (expiry, the alarm, teardown). Indexing every receipt put each
  // completed one at a random place in the index (ordered by its digest key): at a million receipts per shard that
  // index was a fifth of the database and its random writes about a third of each claim's and completion's cost.
  `DROP INDEX receipts_by_lease;
   CREATE INDEX receipts_running_by_lease ON receipts (lease_expires_at) WHERE status = 'running';`,
  // The attempt a takeover took the receipt from, its request's end unknown: its late answer may still settle it.
  `ALTER TABLE receipts ADD COLUMN unknown_from TEXT;`,
  // When the current generation's result may have been bought (see Receipt.boughtAt); receipts from before it read
  // their last write's time.
  `ALTER TABLE receipts ADD COLUMN bought_at INTEGER;`,
];
