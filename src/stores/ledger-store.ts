/**
 * A run's event ledger in its coordinator's storage: append-only, in `seq`
 * order from 1, typed by the HTTP contract's event union (one place
 * documents the events; the emitter, the live feed and the API read them).
 */
import type { LedgerEvent, LedgerEventFields, LedgerEventType } from "../api/responses";
import type { Sql } from "./sql";

export type { LedgerEvent, LedgerEventFields, LedgerEventType } from "../api/responses";

export class LedgerStore {
  #sql: Sql;
  #now: () => number;

  constructor(options: { sql: Sql; now: () => number }) {
    this.#sql = options.sql;
    this.#now = options.now;
  }

  /** Appends an event of `type` with its fields; answers it with its sequence number and time. */
  append<Type extends LedgerEventType>(type: Type, data: LedgerEventFields[Type]): LedgerEvent {
    const at = this.#now();
    this.#sql.write`INSERT INTO events (type, at, data) VALUES (${type}, ${at}, ${JSON.stringify(data)})`;
    const seq = this.#sql<{ seq: number }>`SELECT last_insert_rowid() AS seq`[0]!.seq;
    return toEvent(seq, type, at, data);
  }

  /** Up to `limit` events after `after`, in order. */
  events(after: number, limit: number): LedgerEvent[] {
    return this.#sql<{ seq: number; type: string; at: number; data: string }>`
      SELECT seq, type, at, data FROM events WHERE seq > ${after} ORDER BY seq LIMIT ${limit}`.map((e) =>
      // Written only by `append`, from the typed fields of its type.
      toEvent(e.seq, e.type as LedgerEventType, e.at, JSON.parse(e.data) as LedgerEventFields[LedgerEventType]),
    );
  }

  lastSeq(): number {
    return this.#sql<{ seq: number | null }>`SELECT max(seq) AS seq FROM events`[0]?.seq ?? 0;
  }
}

function toEvent<Type extends LedgerEventType>(seq: number, type: Type, at: number, data: LedgerEventFields[Type]): LedgerEvent {
  return { ...data, seq, type, at: new Date(at).toISOString() } as LedgerEvent;
}
