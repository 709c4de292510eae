/** Test fixture: SQL that takes a run coordinator's schema back to before its map sums (the last migration). */
export const UNDO_MAP_TOTALS = `DROP TRIGGER chunks_totals_insert; DROP TRIGGER chunks_totals_update; DROP TRIGGER chunks_totals_delete;
  DROP TABLE map_totals; DROP INDEX chunks_running; DROP INDEX chunks_blocked; DROP INDEX waits_children;
  ALTER TABLE chunks DROP COLUMN shown_completed; ALTER TABLE chunks DROP COLUMN shown_failed;
  ALTER TABLE chunks DROP COLUMN shown_active; ALTER TABLE chunks DROP COLUMN shown_waiting;
  ALTER TABLE chunks DROP COLUMN shown_blocked;`;
