import { RunStore } from "./run-store";
import { createSql } from "./sql";

/** Migrations after the map sums': UNDO_MAP_TOTALS takes them back too. */
export const AFTER_MAP_TOTALS = 4;

/** Test fixture: SQL that takes a run coordinator's schema back to before its map sums (and what came after them). */
export const UNDO_MAP_TOTALS = `ALTER TABLE watchers DROP COLUMN gave_up; ALTER TABLE child_spend DROP COLUMN provisional; ALTER TABLE watchers DROP COLUMN told_provisional; ALTER TABLE watchers DROP COLUMN moved_micros; DROP TABLE allotment_source; DROP TRIGGER chunks_totals_insert; DROP TRIGGER chunks_totals_update; DROP TRIGGER chunks_totals_delete;
  DROP TABLE map_totals; DROP INDEX chunks_running; DROP INDEX chunks_blocked; DROP INDEX waits_children;
  ALTER TABLE chunks DROP COLUMN shown_completed; ALTER TABLE chunks DROP COLUMN shown_failed;
  ALTER TABLE chunks DROP COLUMN shown_active; ALTER TABLE chunks DROP COLUMN shown_waiting;
  ALTER TABLE chunks DROP COLUMN shown_blocked;`;

/** Test fixture: a coordinator's RunStore over `state`, its run created (a minute's limit) with `input`. */
export function runStoreWithRun(state: DurableObjectState, runId: string, play = "demo-enrich", input: unknown = {}): RunStore {
  const store = new RunStore({ sql: createSql(state.storage), now: Date.now });
  store.create(
    { runId, org: "dev", play, parentRunId: null, force: false, forceToolRefresh: false, deadlineAt: Date.now() + 60_000 },
    input,
  );
  return store;
}
