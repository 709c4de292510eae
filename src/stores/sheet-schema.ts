/** The sheet shard's SQLite schema (see sheet-store.ts for what it holds). */

/** Schema migrations, in order (see `migrate`). */
export const SHEET_MIGRATIONS: readonly string[] = [
  `CREATE TABLE dataset (id INTEGER PRIMARY KEY CHECK (id = 1), shard_count INTEGER NOT NULL);
   CREATE TABLE sheet_rows (
     key TEXT PRIMARY KEY,
     status TEXT NOT NULL CHECK (status IN ('pending', 'completed', 'failed')),
     data TEXT NOT NULL,
     error TEXT,
     written_by_run TEXT,
     written_by_attempt TEXT,
     lease_attempt_id TEXT,
     lease_run_id TEXT,
     lease_seq INTEGER,
     lease_expires_at INTEGER,
     updated_at INTEGER NOT NULL
   ) WITHOUT ROWID;
   CREATE INDEX sheet_rows_lease_expires_at ON sheet_rows (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
   CREATE TABLE run_rows (
     run_id TEXT NOT NULL,
     idx INTEGER NOT NULL,
     key TEXT NOT NULL,
     PRIMARY KEY (run_id, idx)
   ) WITHOUT ROWID;`,
  // Rows become immutable versions: a run's view names the version it computed or reused, so no later run changes it.
  // Rows stored before this have no input digest: they are recomputed (their tool calls still reuse receipts).
  `CREATE TABLE row_versions (
     key TEXT NOT NULL,
     version INTEGER NOT NULL,
     status TEXT NOT NULL CHECK (status IN ('pending', 'completed', 'failed')),
     data TEXT NOT NULL,
     error TEXT,
     input_digest TEXT,
     created_by_run TEXT,
     written_by_run TEXT,
     written_by_attempt TEXT,
     updated_at INTEGER NOT NULL,
     PRIMARY KEY (key, version)
   ) WITHOUT ROWID;
   INSERT INTO row_versions (key, version, status, data, error, input_digest, created_by_run, written_by_run, written_by_attempt, updated_at)
     SELECT key, 1, status, data, error, NULL, coalesce(written_by_run, lease_run_id), written_by_run, written_by_attempt, updated_at FROM sheet_rows;
   CREATE TABLE row_heads (
     key TEXT PRIMARY KEY,
     version INTEGER NOT NULL,
     lease_attempt_id TEXT,
     lease_run_id TEXT,
     lease_seq INTEGER,
     lease_expires_at INTEGER
   ) WITHOUT ROWID;
   INSERT INTO row_heads (key, version, lease_attempt_id, lease_run_id, lease_seq, lease_expires_at)
     SELECT key, 1, lease_attempt_id, lease_run_id, lease_seq, lease_expires_at FROM sheet_rows;
   CREATE INDEX row_heads_lease_expires_at ON row_heads (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
   CREATE INDEX row_heads_lease_run_id ON row_heads (lease_run_id) WHERE lease_run_id IS NOT NULL;
   DROP TABLE sheet_rows;
   ALTER TABLE run_rows ADD COLUMN version INTEGER;
   UPDATE run_rows SET version = 1;`,
  // The newest attempt epoch of each run that claimed here: a claim of an older one is refused (a stale attempt).
  `CREATE TABLE run_epochs (run_id TEXT PRIMARY KEY, attempt_seq INTEGER NOT NULL) WITHOUT ROWID;`,
];
