/**
 * An executor's storage (src/actors/MapExecutor.ts): the chunk attempts it was
 * given (one, or two while the older drains), and an outbox of what must reach the run's coordinator even if this
 * object dies before its next report: bills (the provider charged for them)
 * and salvaged outputs (billed results whose receipt could not be written).
 * Entries leave the outbox once a report carrying them was acknowledged; the
 * coordinator applies them idempotently, so a report sent twice counts once.
 */
import type { AttemptResume, BilledRequest, ChunkAssignment, UnreportedEnd } from "../contracts/executors";
import { textParts } from "../core/utf8";
import type { SalvageEntry } from "../contracts/shards";
import { MAX_PARAM_CHARS, type Sql } from "./sql";

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
  // An executor may hold a second attempt, run alongside the one that drains (ChunkAssignment.alongside).
  `
  CREATE TABLE held (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    attempt_id TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL,
    state TEXT NOT NULL,
    coordinator TEXT NOT NULL
  );
  INSERT INTO held (attempt_id, body, state, coordinator) SELECT attempt_id, body, state, coordinator FROM assignment;
  DROP TABLE assignment;
  `,
  // An assignment's rows may pass SQLite's 2 MB bound on one value (50 rows of 60 KB): its body is kept in parts.
  `
  CREATE TABLE held_parts (attempt_id TEXT NOT NULL, part INTEGER NOT NULL, text TEXT NOT NULL, PRIMARY KEY (attempt_id, part)) WITHOUT ROWID;
  `,
];

/**
 * An attempt held: `assigned` until it starts, `running` once it has (a
 * restart finds it running and reports it dead); `assigned` again, with
 * `resume`, once a wind-down left it to go on in a fresh invocation;
 * `ended`, with `unreported`, once it ended and its end could not be reported.
 */
export interface HeldAssignment {
  assignment: ChunkAssignment;
  state: "assigned" | "running" | "ended";
  resume: AttemptResume | null;
  unreported?: UnreportedEnd;
}

export type OutboxEntry = { seq: number } & ({ kind: "bill"; bill: BilledRequest } | { kind: "salvage"; salvage: SalvageEntry });

export class ExecutorStore {
  #sql: Sql;

  constructor(options: { sql: Sql }) {
    this.#sql = options.sql;
  }

  /**
   * Holds `assignment` and, of what was held, keeps only the attempt it runs
   * alongside (`assignment.alongside`) and those ended whose end is still to
   * be sent ({@link unreported}): every other attempt is replaced.
   * False (nothing changes) when it comes from an older epoch of the run
   * than one this executor was given before: a stale coordinator's, which
   * must not stop a current attempt.
   */
  assign(assignment: ChunkAssignment): boolean {
    const seen = this.#sql<{ attempt_seq: number }>`SELECT attempt_seq FROM epoch WHERE id = 1`[0]?.attempt_seq ?? -1;
    if (assignment.attempt.attemptSeq < seen) return false;
    // The same attempt ended, its end still to be sent, was an earlier invocation's (one that handed its rows back):
    // this assignment takes its place, and so it does of the same attempt held by an earlier invocation (one still
    // running, whose end was heard but not yet answered, runs on to its end, then this one). The same attempt held
    // by this invocation is a retried assign: held already, as it is.
    this.#sql.write`DELETE FROM held WHERE attempt_id = ${assignment.attempt.attemptId} AND state = 'ended'`;
    const same = this.held().find((h) => h.assignment.attempt.attemptId === assignment.attempt.attemptId);
    if (same && same.assignment.invocation === assignment.invocation) return true;
    this.#sql.write`INSERT INTO epoch (id, attempt_seq) VALUES (1, ${assignment.attempt.attemptSeq})
      ON CONFLICT (id) DO UPDATE SET attempt_seq = excluded.attempt_seq`;
    // An ended attempt whose end is still to be reported (ExecutorStore.unreported) stays, to be sent.
    this.#sql.write`DELETE FROM held WHERE attempt_id IS NOT ${assignment.alongside} AND state != 'ended'`;
    this.#dropOrphanParts();
    this.#sql.write`INSERT INTO held (attempt_id, body, state, coordinator)
      VALUES (${assignment.attempt.attemptId}, '', 'assigned', ${assignment.runId})`;
    this.#writeBody(assignment.attempt.attemptId, { assignment, resume: null });
    return true;
  }

  /**
   * The running attempt wound down: it is held `assigned` again, to go on
   * as `resume` says in the next invocation. False when it is no longer held.
   */
  resume(attemptId: string, resume: AttemptResume, of: ChunkAssignment): boolean {
    const held = this.held().find((h) => h.assignment.attempt.attemptId === attemptId);
    // Assigned again by a later invocation meanwhile: that assignment stays, and this run's rows go back.
    if (!held || held.assignment.invocation !== of.invocation) return false;
    this.#sql.write`UPDATE held SET state = 'assigned' WHERE attempt_id = ${attemptId}`;
    this.#writeBody(attemptId, { assignment: held.assignment, resume });
    return true;
  }

  /**
   * The attempt ended and its end could not be reported: held `ended`, for the alarm's retry to send again. A
   * fresh assignment of the same attempt (assigned, not held to go on) took its place meanwhile: it stays as it is;
   * so does one of another invocation than `of` (the assignment whose end this is, when the end was reported
   * across an await: the same attempt assigned again meanwhile may have started, or wound down, since).
   */
  unreported(attemptId: string, unreported: UnreportedEnd, of?: ChunkAssignment): void {
    const held = this.held().find((h) => h.assignment.attempt.attemptId === attemptId);
    if (!held || (held.state === "assigned" && held.resume === null)) return;
    if (of && held.assignment.invocation !== of.invocation) return;
    this.#sql.write`UPDATE held SET state = 'ended' WHERE attempt_id = ${attemptId}`;
    this.#writeBody(attemptId, { assignment: held.assignment, resume: held.resume, unreported });
  }

  /** A body past one value's budget is kept in parts, and the row's own body is empty. */
  #writeBody(attemptId: string, body: Omit<HeldAssignment, "state">): void {
    this.#sql.write`DELETE FROM held_parts WHERE attempt_id = ${attemptId}`;
    const text = JSON.stringify(body);
    const parted = text.length > MAX_PARAM_CHARS;
    this.#sql.write`UPDATE held SET body = ${parted ? "" : text} WHERE attempt_id = ${attemptId}`;
    if (!parted) return;
    for (const [part, chars] of textParts(text, MAX_PARAM_CHARS).entries())
      this.#sql.write`INSERT INTO held_parts (attempt_id, part, text) VALUES (${attemptId}, ${part}, ${chars})`;
  }

  /** The attempts held, oldest first. */
  held(): HeldAssignment[] {
    return this.#sql<{ attempt_id: string; body: string; state: string }>`SELECT attempt_id, body, state FROM held ORDER BY seq`.map(
      (row) => {
        const body = JSON.parse(row.body === "" ? this.#parts(row.attempt_id) : row.body) as
          | Omit<HeldAssignment, "state">
          | ChunkAssignment;
        const state = row.state as HeldAssignment["state"];
        // Bodies stored before wind-downs were the assignment alone.
        return "assignment" in body ? { ...body, state } : { assignment: body, resume: null, state };
      },
    );
  }

  #parts(attemptId: string): string {
    return this.#sql<{ text: string }>`SELECT text FROM held_parts WHERE attempt_id = ${attemptId} ORDER BY part`
      .map((row) => row.text)
      .join("");
  }

  #dropOrphanParts(): void {
    this.#sql.write`DELETE FROM held_parts WHERE attempt_id NOT IN (SELECT attempt_id FROM held)`;
  }

  /** Marks the attempt started; false when another assignment replaced it. */
  markRunning(attemptId: string): boolean {
    return this.#sql.write`UPDATE held SET state = 'running' WHERE attempt_id = ${attemptId}` > 0;
  }

  /** The attempt's run ended and its end was reported: it is no longer held, unless a new assignment took its place. */
  finish(attemptId: string): void {
    if (this.#sql.write`DELETE FROM held WHERE attempt_id = ${attemptId} AND state != 'assigned'` > 0)
      this.#sql.write`DELETE FROM held_parts WHERE attempt_id = ${attemptId}`;
  }

  /** The attempt's end, held `ended`, was reported: it is no longer held, unless a new assignment took its place. */
  finishEnded(attemptId: string): void {
    if (this.#sql.write`DELETE FROM held WHERE attempt_id = ${attemptId} AND state = 'ended'` > 0)
      this.#sql.write`DELETE FROM held_parts WHERE attempt_id = ${attemptId}`;
  }

  addBill(bill: BilledRequest): void {
    this.#sql.write`INSERT INTO outbox (kind, body) VALUES ('bill', ${JSON.stringify(bill)})`;
  }

  addSalvage(salvage: SalvageEntry): void {
    this.#sql.write`INSERT INTO outbox (kind, body) VALUES ('salvage', ${JSON.stringify(salvage)})`;
  }

  /**
   * The oldest outbox entries one report carries: at most `limit`, and past
   * the first, at most `maxChars` of bodies (a salvaged answer may be 512 KiB:
   * five hundred of them would be far past what one RPC may carry).
   */
  outbox(limit: number, maxChars: number): OutboxEntry[] {
    const { last } = this.#cut(limit, maxChars);
    if (last === null) return [];
    return this.#sql<{ seq: number; kind: string; body: string }>`SELECT seq, kind, body FROM outbox WHERE seq <= ${last} ORDER BY seq`.map(
      (row) =>
        row.kind === "bill"
          ? { seq: row.seq, kind: "bill", bill: JSON.parse(row.body) as BilledRequest }
          : { seq: row.seq, kind: "salvage", salvage: JSON.parse(row.body) as SalvageEntry },
    );
  }

  /** More entries wait than one report carries (see {@link outbox}). */
  outboxOverflows(limit: number, maxChars: number): boolean {
    return this.#cut(limit, maxChars).more;
  }

  /** Where one report's entries end (null: the outbox is empty), by their bodies' sizes, and whether more wait. */
  #cut(limit: number, maxChars: number): { last: number | null; more: boolean } {
    const sizes = this.#sql<{ seq: number; chars: number }>`SELECT seq, length(body) AS chars FROM outbox ORDER BY seq LIMIT ${limit + 1}`;
    let last: number | null = null;
    let taken = 0;
    let chars = 0;
    for (const size of sizes) {
      if (taken === limit || (taken > 0 && chars + size.chars > maxChars)) break;
      last = size.seq;
      taken++;
      chars += size.chars;
    }
    return { last, more: sizes.length > taken };
  }

  /** Entries up to `seq` reached the coordinator. */
  shipped(seq: number): void {
    this.#sql.write`DELETE FROM outbox WHERE seq <= ${seq}`;
  }
}
