/**
 * An executor's storage (src/actors/MapExecutor.ts): the chunk attempt it was
 * given, and an outbox of what must reach the run's coordinator even if this
 * object dies before its next report: bills (the provider charged for them)
 * and salvaged outputs (billed results whose receipt could not be written).
 * Entries leave the outbox once a report carrying them was acknowledged; the
 * coordinator applies them idempotently, so a report sent twice counts once.
 */
import type { BilledRequest, ChunkAssignment } from "../contracts/executors";
import type { SalvageEntry } from "../contracts/shards";
import type { Sql } from "./sql";

export const EXECUTOR_MIGRATIONS = [
  `
  CREATE TABLE assignment (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    attempt_id TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL,
    coordinator TEXT NOT NULL
  );
  CREATE TABLE outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, body TEXT NOT NULL);
  CREATE TABLE epoch (id INTEGER PRIMARY KEY CHECK (id = 1), attempt_seq INTEGER NOT NULL);
  `,
];

/** The attempt held: `assigned` until it starts, `running` once it has (a restart finds it running and reports it dead). */
export interface HeldAssignment {
  assignment: ChunkAssignment;
  state: "assigned" | "running";
}

export type OutboxEntry = { seq: number } & ({ kind: "bill"; bill: BilledRequest } | { kind: "salvage"; salvage: SalvageEntry });

export class ExecutorStore {
  #sql: Sql;

  constructor(options: { sql: Sql }) {
    this.#sql = options.sql;
  }

  /**
   * Holds `assignment`, replacing whatever was held; false (nothing changes)
   * when it comes from an older epoch of the run than one this executor was
   * given before: a stale coordinator's, which must not stop a current attempt.
   */
  assign(assignment: ChunkAssignment): boolean {
    const seen = this.#sql<{ attempt_seq: number }>`SELECT attempt_seq FROM epoch WHERE id = 1`[0]?.attempt_seq ?? -1;
    if (assignment.attempt.attemptSeq < seen) return false;
    // The same attempt again (a retried assign): it is held already, as it is.
    if (this.#sql<{ n: number }>`SELECT count(*) AS n FROM assignment WHERE attempt_id = ${assignment.attempt.attemptId}`[0]!.n > 0)
      return true;
    this.#sql.write`INSERT INTO epoch (id, attempt_seq) VALUES (1, ${assignment.attempt.attemptSeq})
      ON CONFLICT (id) DO UPDATE SET attempt_seq = excluded.attempt_seq`;
    this.#sql.write`INSERT INTO assignment (id, attempt_id, body, state, coordinator)
      VALUES (1, ${assignment.attempt.attemptId}, ${JSON.stringify(assignment)}, 'assigned', ${assignment.runId})
      ON CONFLICT (id) DO UPDATE SET attempt_id = excluded.attempt_id, body = excluded.body, state = 'assigned', coordinator = excluded.coordinator`;
    return true;
  }

  held(): HeldAssignment | null {
    const row = this.#sql<{ body: string; state: string }>`SELECT body, state FROM assignment WHERE id = 1`[0];
    return row ? { assignment: JSON.parse(row.body) as ChunkAssignment, state: row.state as HeldAssignment["state"] } : null;
  }

  /** Marks the attempt started; false when another assignment replaced it. */
  markRunning(attemptId: string): boolean {
    return this.#sql.write`UPDATE assignment SET state = 'running' WHERE id = 1 AND attempt_id = ${attemptId}` > 0;
  }

  /** The attempt ended and its end was reported: nothing is held (unless a newer assignment replaced it). */
  finish(attemptId: string): void {
    this.#sql.write`DELETE FROM assignment WHERE id = 1 AND attempt_id = ${attemptId}`;
  }

  /** The run whose coordinator the outbox goes to (the last assignment's), if any. */
  coordinator(): string | null {
    return this.#sql<{ coordinator: string }>`SELECT coordinator FROM assignment WHERE id = 1`[0]?.coordinator ?? null;
  }

  addBill(bill: BilledRequest): void {
    this.#sql.write`INSERT INTO outbox (kind, body) VALUES ('bill', ${JSON.stringify(bill)})`;
  }

  addSalvage(salvage: SalvageEntry): void {
    this.#sql.write`INSERT INTO outbox (kind, body) VALUES ('salvage', ${JSON.stringify(salvage)})`;
  }

  /** The oldest outbox entries, at most `limit`. */
  outbox(limit: number): OutboxEntry[] {
    return this.#sql<{ seq: number; kind: string; body: string }>`SELECT seq, kind, body FROM outbox ORDER BY seq LIMIT ${limit}`.map(
      (row) =>
        row.kind === "bill"
          ? { seq: row.seq, kind: "bill", bill: JSON.parse(row.body) as BilledRequest }
          : { seq: row.seq, kind: "salvage", salvage: JSON.parse(row.body) as SalvageEntry },
    );
  }

  /** Entries up to `seq` reached the coordinator. */
  shipped(seq: number): void {
    this.#sql.write`DELETE FROM outbox WHERE seq <= ${seq}`;
  }
}
