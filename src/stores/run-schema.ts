/** The RunCoordinator's SQLite schema, as ordered migrations. */
export const runMigrations = [
  `
  CREATE TABLE run (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    run_id TEXT NOT NULL,
    org TEXT NOT NULL,
    play TEXT NOT NULL,
    parent_run_id TEXT,
    status TEXT NOT NULL,
    force INTEGER NOT NULL,
    force_tool_refresh INTEGER NOT NULL,
    run_attempt INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    error TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    infra_failures INTEGER NOT NULL DEFAULT 0,
    object_rpcs INTEGER NOT NULL DEFAULT 0,
    provider_requests INTEGER NOT NULL DEFAULT 0,
    deadline_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  );
  CREATE TABLE input_parts (part INTEGER PRIMARY KEY, text TEXT NOT NULL);
  CREATE TABLE maps (
    name TEXT PRIMARY KEY,
    ordinal INTEGER NOT NULL,
    shard_count INTEGER NOT NULL,
    total INTEGER NOT NULL,
    duplicates_dropped INTEGER NOT NULL,
    chunk_rows INTEGER NOT NULL,
    chunk_count INTEGER NOT NULL,
    done INTEGER NOT NULL DEFAULT 0
  );
  CREATE TABLE chunks (
    map TEXT NOT NULL,
    idx INTEGER NOT NULL,
    rows INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    attempt_seq INTEGER NOT NULL DEFAULT -1,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    reused INTEGER NOT NULL DEFAULT 0,
    blocked INTEGER NOT NULL DEFAULT 0,
    retries INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (map, idx)
  );
  CREATE TABLE failure_samples (map TEXT NOT NULL, key TEXT NOT NULL, error TEXT NOT NULL, PRIMARY KEY (map, key));
  CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, type TEXT NOT NULL, at INTEGER NOT NULL, data TEXT NOT NULL);
  `,
  // Tool dispatch: provider retries and 429s in the run's usage, and salvage (src/stores/salvage-store.ts).
  `
  ALTER TABLE run ADD COLUMN provider_retries INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE run ADD COLUMN rate_limited INTEGER NOT NULL DEFAULT 0;
  CREATE TABLE salvage (
    receipt_key TEXT PRIMARY KEY,
    tool_id TEXT NOT NULL,
    attempt TEXT NOT NULL,
    output TEXT NOT NULL,
    complete_attempts INTEGER NOT NULL,
    error TEXT NOT NULL,
    at INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'restored', 'superseded')),
    restore_tries INTEGER NOT NULL DEFAULT 0
  );
  `,
  // Child plays, durable waits and signals (src/stores/journal-store.ts): the run's nesting depth, the
  // journal of waits, signals kept until a wait takes them, parents to tell when the run ends.
  `
  ALTER TABLE run ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
  CREATE TABLE waits (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('sleep', 'event', 'child')),
    state TEXT NOT NULL DEFAULT 'waiting' CHECK (state IN ('waiting', 'done', 'failed')),
    event_key TEXT,
    child_play TEXT,
    child_run_id TEXT,
    child_owned INTEGER NOT NULL DEFAULT 0,
    due_at INTEGER,
    timeout_at INTEGER,
    result TEXT,
    error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  );
  CREATE INDEX waits_due ON waits (due_at) WHERE state = 'waiting';
  CREATE INDEX waits_child ON waits (child_run_id);
  CREATE TABLE signals (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_key TEXT NOT NULL,
    data TEXT NOT NULL,
    dedupe_key TEXT UNIQUE,
    consumed_by TEXT,
    at INTEGER NOT NULL
  );
  CREATE INDEX signals_open ON signals (event_key, seq) WHERE consumed_by IS NULL;
  CREATE TABLE watchers (run_id TEXT PRIMARY KEY, notified INTEGER NOT NULL DEFAULT 0);
  CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
  `,
  // Redispatch and reconcile (src/runtime/map/map-runner.ts): how often a chunk's attempt died and was
  // redispatched, how often a map's finalize repaired a shortfall, and the run's test policy overrides.
  `
  ALTER TABLE chunks ADD COLUMN redispatches INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE maps ADD COLUMN repairs INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE run ADD COLUMN test_policy TEXT;
  `,
  // Recovery lookups (a taken-over call's result asked of the provider) are counted apart from provider requests;
  // a chunk whose rows another run holds remembers which run and until when.
  `
  ALTER TABLE run ADD COLUMN provider_lookups INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE chunks ADD COLUMN blocked_by TEXT;
  ALTER TABLE chunks ADD COLUMN blocked_until INTEGER;
  `,
  // Spend (src/stores/spend-store.ts): each billable request reserved, then billed; the run's cap and
  // whether it may re-send requests whose outcome is unknown.
  `
  CREATE TABLE spend (
    request_key TEXT PRIMARY KEY,
    tool_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    micros INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('reserved', 'billed')),
    at INTEGER NOT NULL,
    reported INTEGER NOT NULL DEFAULT 0
  );
  ALTER TABLE run ADD COLUMN max_spend_micros INTEGER;
  ALTER TABLE run ADD COLUMN retry_unknown INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE run ADD COLUMN outcome_unknown INTEGER NOT NULL DEFAULT 0;
  `,
  // Spend sums kept as requests are reserved, billed and released, and an index of the bills not yet reported:
  // a million-row run keeps two million spend rows, and summing them for every progress event, run view and
  // cap check slowed its coordinator as it grew.
  `
  CREATE TABLE spend_totals (
    tool_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    state TEXT NOT NULL,
    calls INTEGER NOT NULL,
    micros INTEGER NOT NULL,
    PRIMARY KEY (tool_id, provider, state)
  ) WITHOUT ROWID;
  INSERT INTO spend_totals (tool_id, provider, state, calls, micros)
    SELECT tool_id, provider, state, count(*), sum(micros) FROM spend GROUP BY tool_id, provider, state;
  CREATE INDEX spend_unreported ON spend (at) WHERE state = 'billed' AND reported = 0;
  `,
  // Bills reported to the org by the order they were billed in (billed_seq), not by rowid: a request reserved
  // early and billed late, or billed while a report was on its way, was marked reported without being counted.
  // The org keeps the position each run reached, so a report whose answer was lost is not added twice.
  // Bills already billed keep their rowid as their place; what was marked reported is up to the last such.
  `
  ALTER TABLE spend ADD COLUMN billed_seq INTEGER;
  UPDATE spend SET billed_seq = rowid WHERE state = 'billed';
  CREATE INDEX spend_billed_seq ON spend (billed_seq) WHERE billed_seq IS NOT NULL;
  CREATE TABLE spend_report (id INTEGER PRIMARY KEY CHECK (id = 1), up_to INTEGER NOT NULL);
  INSERT INTO spend_report (id, up_to) SELECT 1, coalesce(max(rowid), 0) FROM spend WHERE state = 'billed' AND reported = 1;
  DROP INDEX spend_unreported;
  `,
  // A chunk whose attempt in the coordinator wound down (its invocation's budget ran low) keeps what is left of it:
  // the next invocation runs only those rows (ChunkResume).
  `ALTER TABLE chunks ADD COLUMN resume TEXT;`,
  // The last report applied of each executor's reporter (AttemptReport.seq): one sent again because its answer was
  // lost is not applied twice.
  `CREATE TABLE reports_applied (reporter TEXT PRIMARY KEY, seq INTEGER NOT NULL, at INTEGER NOT NULL) WITHOUT ROWID;`,
  // A capped run's children spend from its cap (src/runtime/tools/child-spend.ts): what each child was allotted (or
  // spent, once ended), and, in a child, what its parent allotted it.
  `
  CREATE TABLE child_spend (child_run_id TEXT PRIMARY KEY, micros INTEGER NOT NULL, ended INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
  CREATE TABLE parent_allotment (id INTEGER PRIMARY KEY CHECK (id = 1), micros INTEGER NOT NULL);
  `,
  // The end a run decided, kept while it is carried out (src/runtime/invocation/run-end.ts): an invocation that
  // dies mid-way through it leaves the next one to finish it, not to run the play again.
  `CREATE TABLE run_ending (id INTEGER PRIMARY KEY CHECK (id = 1), ending TEXT NOT NULL);`,
  // What each parent was last told this run spent (null: told nothing, or it gave this run up): bills that reach the
  // run after its end are told again, so a capped parent does not spend that room twice.
  `ALTER TABLE watchers ADD COLUMN told_micros INTEGER;`,
  // Whether a done chunk's completion is in the ledger (`chunks.completed`): one done whose invocation died before
  // the event went out is told by the next (src/runtime/map/map-progress.ts). Chunks done before this are told.
  `
  ALTER TABLE chunks ADD COLUMN told INTEGER NOT NULL DEFAULT 1;
  CREATE INDEX chunks_untold ON chunks (map, idx) WHERE told = 0;
  `,
  // A map's progress summed every chunk of it (10,000 in a million-row map) on each progress tick, run view and
  // snapshot: each chunk's share (what RunStore.progress counts of it) is a column, and triggers keep their sums per
  // map. The chunks a tick or an invocation's start looks for, and a run's children, are indexed.
  `
  ALTER TABLE chunks ADD COLUMN shown_completed INTEGER GENERATED ALWAYS AS (CASE WHEN state = 'running' THEN 0 ELSE completed END);
  ALTER TABLE chunks ADD COLUMN shown_failed INTEGER GENERATED ALWAYS AS (CASE WHEN state = 'running' THEN 0 ELSE failed END);
  ALTER TABLE chunks ADD COLUMN shown_active INTEGER GENERATED ALWAYS AS (CASE WHEN state = 'running' THEN rows ELSE 0 END);
  ALTER TABLE chunks ADD COLUMN shown_waiting INTEGER
    GENERATED ALWAYS AS (CASE WHEN state = 'pending' THEN max(0, rows - completed - failed - blocked) ELSE 0 END);
  ALTER TABLE chunks ADD COLUMN shown_blocked INTEGER GENERATED ALWAYS AS (CASE WHEN state = 'pending' THEN blocked ELSE 0 END);
  CREATE TABLE map_totals (
    map TEXT PRIMARY KEY,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 0,
    waiting INTEGER NOT NULL DEFAULT 0,
    blocked INTEGER NOT NULL DEFAULT 0
  ) WITHOUT ROWID;
  INSERT INTO map_totals (map, completed, failed, active, waiting, blocked)
    SELECT map, sum(shown_completed), sum(shown_failed), sum(shown_active), sum(shown_waiting), sum(shown_blocked)
    FROM chunks GROUP BY map;
  CREATE TRIGGER chunks_totals_insert AFTER INSERT ON chunks BEGIN
    INSERT OR IGNORE INTO map_totals (map) VALUES (NEW.map);
    UPDATE map_totals SET completed = completed + NEW.shown_completed, failed = failed + NEW.shown_failed,
      active = active + NEW.shown_active, waiting = waiting + NEW.shown_waiting, blocked = blocked + NEW.shown_blocked
    WHERE map = NEW.map;
  END;
  CREATE TRIGGER chunks_totals_update AFTER UPDATE OF map, state, rows, completed, failed, blocked ON chunks BEGIN
    UPDATE map_totals SET completed = completed - OLD.shown_completed, failed = failed - OLD.shown_failed,
      active = active - OLD.shown_active, waiting = waiting - OLD.shown_waiting, blocked = blocked - OLD.shown_blocked
    WHERE map = OLD.map;
    INSERT OR IGNORE INTO map_totals (map) VALUES (NEW.map);
    UPDATE map_totals SET completed = completed + NEW.shown_completed, failed = failed + NEW.shown_failed,
      active = active + NEW.shown_active, waiting = waiting + NEW.shown_waiting, blocked = blocked + NEW.shown_blocked
    WHERE map = NEW.map;
  END;
  CREATE TRIGGER chunks_totals_delete AFTER DELETE ON chunks BEGIN
    UPDATE map_totals SET completed = completed - OLD.shown_completed, failed = failed - OLD.shown_failed,
      active = active - OLD.shown_active, waiting = waiting - OLD.shown_waiting, blocked = blocked - OLD.shown_blocked
    WHERE map = OLD.map;
  END;
  CREATE INDEX chunks_running ON chunks (map, idx) WHERE state = 'running';
  CREATE INDEX chunks_blocked ON chunks (map, blocked_until) WHERE state = 'pending' AND blocked > 0 AND blocked_by IS NOT NULL;
  CREATE INDEX waits_children ON waits (kind) WHERE kind = 'child';
  `,
  // A shared child whose allotting parent gave it up while another waits spends from that other's cap from then on
  // (src/runtime/tools/child-spend.ts): which parent allots to it, and what the parents before counted of its spend.
  `CREATE TABLE allotment_source (id INTEGER PRIMARY KEY CHECK (id = 1), parent_run_id TEXT NOT NULL, base_micros INTEGER NOT NULL);`,
  // What a parent the run's allotment moved from is to be told the run spent of its cap, until it is told (null: nothing
  // to tell): a telling that failed, or that a crash cut short, is told again by the run's alarm.
  `ALTER TABLE watchers ADD COLUMN moved_micros INTEGER;`,
  // Whether an ended child's figure counts allotments its own children held as it told it (they may spend less): a
  // later, lower figure of the child's replaces it (src/stores/spend-store.ts childEnded); and whether the figure a
  // run told each parent was such a one (told again once it is not).
  `
  ALTER TABLE child_spend ADD COLUMN provisional INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE watchers ADD COLUMN told_provisional INTEGER NOT NULL DEFAULT 0;
  `,
  // Whether the parent gave this run up (it cancelled it): it is told nothing of the run's end but what it spent of
  // the parent's cap, which the parent counts in place of its allotment (src/runtime/invocation/run-links.ts).
  `ALTER TABLE watchers ADD COLUMN gave_up INTEGER NOT NULL DEFAULT 0;`,
];
