/**
 * The coordinator's journal of waits: every child play, external event and
 * sleep a play waits on, keyed deterministically so that a replayed play
 * finds its own entry and makes no effect twice. Beside it: the signals sent
 * to the run (kept until a wait takes them), the parent runs to tell when
 * this run ends, and replay counters. Plain logic over the Sql helper.
 *
 * One alarm, many deadlines: each waiting entry may carry a `dueAt` (a
 * sleep's wake-up, an event's timeout, a child's next check) and
 * {@link JournalStore.nextDue} is the earliest of them.
 */
import type { Sql } from "./sql";

/** Counters of entries settled, and of those settled when the play that last parked the run began. */
const SETTLES = "wait_settles";
const PARKED_AT = "parked_at_settles";

export type WaitKind = "sleep" | "event" | "child";
export type WaitState = "waiting" | "done" | "failed";

/** Why a wait failed, as the play will see it thrown. */
export interface WaitError {
  code: string;
  message: string;
}

export interface WaitEntry {
  key: string;
  kind: WaitKind;
  state: WaitState;
  eventKey: string | null;
  childPlay: string | null;
  childRunId: string | null;
  /** This run started the child (it is the child's recorded parent), so it may cancel it. */
  childOwned: boolean;
  /** The next deadline of a waiting entry; null: none (it waits for a message only). */
  dueAt: number | null;
  timeoutAt: number | null;
  result: unknown;
  error: WaitError | null;
  createdAt: number;
}

/** How a wait ended. */
export type WaitOutcome = { state: "done"; result: unknown } | { state: "failed"; error: WaitError };

type WaitRow = {
  key: string;
  kind: string;
  state: string;
  event_key: string | null;
  child_play: string | null;
  child_run_id: string | null;
  child_owned: number;
  due_at: number | null;
  timeout_at: number | null;
  result: string | null;
  error: string | null;
  created_at: number;
};

function rowToWait(r: WaitRow): WaitEntry {
  return {
    key: r.key,
    kind: r.kind as WaitKind,
    state: r.state as WaitState,
    eventKey: r.event_key,
    childPlay: r.child_play,
    childRunId: r.child_run_id,
    childOwned: r.child_owned === 1,
    dueAt: r.due_at,
    timeoutAt: r.timeout_at,
    result: r.result === null ? null : JSON.parse(r.result),
    error: r.error === null ? null : (JSON.parse(r.error) as WaitError),
    createdAt: r.created_at,
  };
}

export class JournalStore {
  #sql: Sql;
  #now: () => number;

  constructor(options: { sql: Sql; now: () => number }) {
    this.#sql = options.sql;
    this.#now = options.now;
  }

  get(key: string): WaitEntry | null {
    const row = this.#sql<WaitRow>`SELECT * FROM waits WHERE key = ${key}`[0];
    return row ? rowToWait(row) : null;
  }

  /** Files the entry `from` under `to` instead (a child call's key whose scheme changed); false when there is none. */
  rekey(from: string, to: string): boolean {
    if (!this.get(from) || this.get(to)) return false;
    this.#sql.write`UPDATE waits SET key = ${to} WHERE key = ${from}`;
    return true;
  }

  /**
   * Records a new waiting entry, due `dueInMs` and timing out `timeoutMs` from
   * now (one clock reading, so `timeoutAt - createdAt` is exactly `timeoutMs`);
   * returns whichever entry the key holds (a replay finds the first).
   */
  open(entry: {
    key: string;
    kind: WaitKind;
    eventKey?: string;
    childPlay?: string;
    dueInMs: number | null;
    timeoutMs: number | null;
  }): WaitEntry {
    const now = this.#now();
    const dueAt = entry.dueInMs === null ? null : now + entry.dueInMs;
    const timeoutAt = entry.timeoutMs === null ? null : now + entry.timeoutMs;
    this.#sql.write`INSERT INTO waits (key, kind, event_key, child_play, due_at, timeout_at, created_at, updated_at)
      VALUES (${entry.key}, ${entry.kind}, ${entry.eventKey ?? null}, ${entry.childPlay ?? null}, ${dueAt}, ${timeoutAt}, ${now}, ${now})
      ON CONFLICT (key) DO NOTHING`;
    return this.get(entry.key)!;
  }

  /** Ends a waiting entry; false if it had already ended (messages may arrive twice). */
  settle(key: string, outcome: WaitOutcome): boolean {
    const result = outcome.state === "done" ? JSON.stringify(outcome.result ?? null) : null;
    const error = outcome.state === "failed" ? JSON.stringify(outcome.error) : null;
    const settled =
      this.#sql
        .write`UPDATE waits SET state = ${outcome.state}, result = ${result}, error = ${error}, due_at = NULL, updated_at = ${this.#now()}
      WHERE key = ${key} AND state = 'waiting'` > 0;
    if (settled) this.bump(SETTLES);
    return settled;
  }

  /** How many entries have settled so far: a play replayed from here on sees them all ({@link notePark}). */
  settles(): number {
    return this.counter(SETTLES);
  }

  /**
   * The run parked, its play having run with the entries settled up to `settles` (the count as it began); null: it
   * parked with work of its own left (a map's chunks it stopped), which a replay goes on with whatever has settled.
   */
  notePark(settles: number | null): void {
    if (settles === null) this.resetCounter(PARKED_AT);
    else
      this.#sql.write`INSERT INTO counters (name, value) VALUES (${PARKED_AT}, ${settles})
      ON CONFLICT (name) DO UPDATE SET value = excluded.value`;
  }

  /** Whether an entry settled since the play that parked the run began (true when no park was noted, or it left work). */
  settledSinceParked(): boolean {
    const parked = this.#sql<{ value: number }>`SELECT value FROM counters WHERE name = ${PARKED_AT}`[0];
    return parked === undefined || parked.value !== this.settles();
  }

  /** Whether a waiting entry but a child's has come to its deadline (a sleep's end, a wait's timeout): a replay settles it. */
  othersDue(now: number): boolean {
    return this.#sql`SELECT 1 FROM waits WHERE state = 'waiting' AND kind != 'child' AND due_at <= ${now} LIMIT 1`.length > 0;
  }

  setDue(key: string, dueAt: number | null): void {
    this.#sql.write`UPDATE waits SET due_at = ${dueAt}, updated_at = ${this.#now()} WHERE key = ${key} AND state = 'waiting'`;
  }

  /** The earliest deadline of any waiting entry, or null when every wait is for a message only. */
  nextDue(): number | null {
    return this.#sql<{ at: number | null }>`SELECT min(due_at) AS at FROM waits WHERE state = 'waiting'`[0]?.at ?? null;
  }

  // ---- children

  /** Child entries of this run, started or reserved: what `maxChildrenPerRun` counts. */
  childCount(): number {
    // Identical calls with different timeouts have entries of their own on one child: it counts once.
    return this.#sql<{ n: number }>`SELECT count(DISTINCT coalesce(child_run_id, key)) AS n FROM waits WHERE kind = 'child'`[0]!.n;
  }

  /** Records which run a child entry stands for, and when to check on it next. */
  bindChild(key: string, childRunId: string, owned: boolean, dueAt: number | null): void {
    this.#sql
      .write`UPDATE waits SET child_run_id = ${childRunId}, child_owned = ${owned ? 1 : 0}, due_at = ${dueAt}, updated_at = ${this.#now()}
      WHERE key = ${key} AND state = 'waiting'`;
  }

  /** Waiting entries bound to this child run. */
  waitingOn(childRunId: string): WaitEntry[] {
    return this.#sql<WaitRow>`SELECT * FROM waits WHERE child_run_id = ${childRunId} AND state = 'waiting'`.map(rowToWait);
  }

  /** Waiting child entries whose deadline has come: to ask the child how it is doing. */
  dueChildren(now: number, limit: number): WaitEntry[] {
    return this
      .#sql<WaitRow>`SELECT * FROM waits WHERE state = 'waiting' AND kind = 'child' AND child_run_id IS NOT NULL AND due_at <= ${now}
      ORDER BY due_at LIMIT ${limit}`.map(rowToWait);
  }

  /** Children this run started and still waits on (to cancel with it). */
  /** The children this run still waits on (started by it or another parent's same call it joined). */
  waitingChildren(): string[] {
    return this.#sql<{ id: string }>`SELECT DISTINCT child_run_id AS id FROM waits
      WHERE state = 'waiting' AND kind = 'child' AND child_run_id IS NOT NULL`.map((r) => r.id);
  }

  // ---- signals

  /**
   * Keeps a signal until a wait takes it. With a `dedupeKey`, a second signal
   * carrying the same key is dropped (`duplicate`).
   */
  addSignal(eventKey: string, dataJson: string, dedupeKey: string | null): { seq: number; duplicate: boolean } {
    // Looked up first (rowsWritten cannot tell: an ignored insert still touches the AUTOINCREMENT sequence).
    const seen = dedupeKey === null ? undefined : this.#sql<{ seq: number }>`SELECT seq FROM signals WHERE dedupe_key = ${dedupeKey}`[0];
    if (seen) return { seq: seen.seq, duplicate: true };
    this.#sql.write`INSERT INTO signals (event_key, data, dedupe_key, at) VALUES (${eventKey}, ${dataJson}, ${dedupeKey}, ${this.#now()})`;
    return { seq: this.#sql<{ seq: number }>`SELECT last_insert_rowid() AS seq`[0]!.seq, duplicate: false };
  }

  /** How many signals no wait has taken yet. */
  openSignals(): number {
    return this.#sql<{ n: number }>`SELECT COUNT(*) AS n FROM signals WHERE consumed_by IS NULL`[0]!.n;
  }

  /** The signal delivered with `dedupeKey`, and whether a wait has taken it. */
  signalByDedupeKey(dedupeKey: string): { eventKey: string; dataJson: string; consumed: boolean } | null {
    const row = this.#sql<{
      event_key: string;
      data: string;
      consumed_by: string | null;
    }>`SELECT event_key, data, consumed_by FROM signals WHERE dedupe_key = ${dedupeKey}`[0];
    return row ? { eventKey: row.event_key, dataJson: row.data, consumed: row.consumed_by !== null } : null;
  }

  /** The oldest signal for `eventKey` no wait has taken yet, sent before `before` (a wait's timeout) when given. */
  openSignal(eventKey: string, before: number | null = null): { seq: number; data: unknown } | null {
    const row = this.#sql<{
      seq: number;
      data: string;
    }>`SELECT seq, data FROM signals WHERE event_key = ${eventKey} AND consumed_by IS NULL AND at < ${before ?? Number.MAX_SAFE_INTEGER}
      ORDER BY seq LIMIT 1`[0];
    return row ? { seq: row.seq, data: JSON.parse(row.data) } : null;
  }

  /**
   * The oldest entry waiting for `eventKey` whose timeout has not come by `now`
   * (one past it fails `event_timeout` at its replay, whatever arrives since).
   * Entries opened together (`Promise.all`) are in the order the play opened them.
   */
  waitingFor(eventKey: string, now: number): WaitEntry | null {
    const row = this.#sql<WaitRow>`SELECT * FROM waits WHERE kind = 'event' AND event_key = ${eventKey} AND state = 'waiting'
      AND (timeout_at IS NULL OR timeout_at > ${now}) ORDER BY created_at, rowid LIMIT 1`[0];
    return row ? rowToWait(row) : null;
  }

  /** Hands signal `seq` to the waiting entry `key` (both in one step: a signal is taken once). */
  consumeSignal(seq: number, key: string, data: unknown): boolean {
    if (!this.settle(key, { state: "done", result: data })) return false;
    this.#sql.write`UPDATE signals SET consumed_by = ${key} WHERE seq = ${seq}`;
    return true;
  }

  // ---- watchers: parent runs to tell when this run ends

  addWatcher(runId: string): void {
    this.#sql.write`INSERT INTO watchers (run_id) VALUES (${runId}) ON CONFLICT (run_id) DO NOTHING`;
  }

  unnotifiedWatchers(): string[] {
    return this.#sql<{ run_id: string }>`SELECT run_id FROM watchers WHERE notified = 0 ORDER BY run_id`.map((r) => r.run_id);
  }

  /**
   * The parent gave this run up (it cancelled it): it is told nothing of the run's end but, as it ends, what it spent
   * of the parent's cap (a capped parent counts that in place of its allotment: {@link parentsToTell}).
   */
  markGaveUp(runId: string): void {
    this.#sql.write`UPDATE watchers SET notified = 1, gave_up = 1 WHERE run_id = ${runId}`;
  }

  /**
   * `runId`, the parent allotting to this run, gave it up while another still waits on it: it is told nothing of the
   * run's end, but that the run spent `micros` of its cap, which it counts as final (kept until told, {@link movesToTell}).
   */
  markMoved(runId: string, micros: number): void {
    this.#sql.write`UPDATE watchers SET notified = 1, gave_up = 0, moved_micros = ${micros} WHERE run_id = ${runId}`;
  }

  /** The parents this run's allotment moved from that are still to be told what it spent of their caps. */
  movesToTell(): { runId: string; micros: number }[] {
    return this.#sql<{ run_id: string; micros: number }>`SELECT run_id, moved_micros AS micros FROM watchers
      WHERE moved_micros IS NOT NULL ORDER BY run_id`.map((r) => ({ runId: r.run_id, micros: r.micros }));
  }

  /** The parent was told this run spent `micros` of its cap (a figure that changed meanwhile is still to tell). */
  markMoveTold(runId: string, micros: number): void {
    this.#sql.write`UPDATE watchers SET moved_micros = NULL WHERE run_id = ${runId} AND moved_micros = ${micros}`;
  }

  /**
   * The parents to tell of this run's end: those not told yet, those told it spent less than `spentMicros` (bills
   * that came after its end), and, unless `spentMicros` still counts allotments its children hold (`provisional`),
   * those told more, or told a figure that counted such allotments. A parent that gave the run up (`gaveUp`) is told
   * only what it spent, likewise.
   */
  parentsToTell(spentMicros: number, provisional = false): { runId: string; again: boolean; gaveUp: boolean }[] {
    const exact = provisional ? 0 : 1;
    return this.#sql<{ run_id: string; told: number | null; gave_up: number }>`SELECT run_id, told_micros AS told, gave_up
      FROM watchers WHERE notified = 0 OR (gave_up = 1 AND told_micros IS NULL) OR (told_micros IS NOT NULL
        AND (told_micros < ${spentMicros} OR (${exact} = 1 AND (told_micros > ${spentMicros} OR told_provisional = 1))))
      ORDER BY run_id`.map((r) => ({
      runId: r.run_id,
      // Told of this run's end already, when it had spent another figure.
      again: r.told !== null,
      gaveUp: r.gave_up === 1,
    }));
  }

  /** The parent was told this run ended having spent `spentMicros` (another figure is told again: parentsToTell). */
  markTold(runId: string, spentMicros: number, provisional = false): void {
    this.#sql.write`UPDATE watchers SET notified = 1, told_micros = ${spentMicros}, told_provisional = ${provisional ? 1 : 0}
      WHERE run_id = ${runId}`;
  }

  // ---- replay counters

  counter(name: string): number {
    return this.#sql<{ value: number }>`SELECT value FROM counters WHERE name = ${name}`[0]?.value ?? 0;
  }

  resetCounter(name: string): void {
    this.#sql.write`DELETE FROM counters WHERE name = ${name}`;
  }

  bump(name: string): number {
    this.#sql.write`INSERT INTO counters (name, value) VALUES (${name}, 1) ON CONFLICT (name) DO UPDATE SET value = value + 1`;
    return this.counter(name);
  }
}
