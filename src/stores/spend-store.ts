/**
 * A run's spend, kept in its coordinator (the table is created by the run
 * schema): one row per billable provider request (a call or a batch member,
 * keyed by the idempotency key sent with it), reserved before it is sent and
 * billed once the provider answered it. The run's cap is checked against
 * everything reserved or billed, so it holds however many chunks and batches
 * are in flight; a reservation whose request was not billed is released.
 *
 * Credits are kept as integer micro-credits, so sums are exact.
 */
import type { Sql } from "./sql";

/** Micro-credits per credit. */
export const MICROS = 1_000_000;

/** Credits as whole micro-credits (prices are rounded to the micro-credit). */
export function toMicros(credits: number): number {
  return Math.round(credits * MICROS);
}

export function toCredits(micros: number): number {
  return micros / MICROS;
}

/** One billable request the run is about to send. */
export interface SpendRequest {
  /** The idempotency key sent to the provider: one billable request. */
  requestKey: string;
  toolId: string;
  provider: string;
  credits: number;
}

/** What a run was billed, in credits (API.md "Spend": `usage.spend`). */
export interface SpendTotals {
  total: number;
  byProvider: Record<string, number>;
  byTool: Record<string, number>;
}

/** Billed spend not yet added to the org's daily totals, by day and provider, and the position it reaches. */
export interface SpendReport {
  upTo: number;
  days: { day: string; provider: string; micros: number }[];
}

export class SpendStore {
  #sql: Sql;
  #now: () => number;

  constructor(options: { sql: Sql; now: () => number }) {
    this.#sql = options.sql;
    this.#now = options.now;
  }

  /**
   * Reserves the request's price unless that would take what the run has
   * reserved and billed past `capMicros` (null: no cap). A request already
   * reserved or billed (a retry, a takeover of the run's own call) keeps its
   * row and is granted.
   */
  reserve(request: SpendRequest, capMicros: number | null): boolean {
    const found = this.#sql<{ n: number }>`SELECT count(*) AS n FROM spend WHERE request_key = ${request.requestKey}`[0]!.n;
    if (found > 0) return true;
    const micros = toMicros(request.credits);
    if (capMicros !== null && this.committedMicros() + micros > capMicros) return false;
    this.#sql.write`INSERT INTO spend (request_key, tool_id, provider, micros, state, at)
      VALUES (${request.requestKey}, ${request.toolId}, ${request.provider}, ${micros}, 'reserved', ${this.#now()})`;
    return true;
  }

  /** The provider answered the request: its reservation is now spend. Idempotent. */
  bill(requestKey: string): void {
    this.#sql.write`UPDATE spend SET state = 'billed', at = ${this.#now()} WHERE request_key = ${requestKey} AND state = 'reserved'`;
  }

  /** The request was billed though its bill was not recorded (see `SpendLedger.recordBilled`): spend, reserved or not. True when this recorded it. */
  recordBilled(request: SpendRequest): boolean {
    const written = this.#sql.write`INSERT INTO spend (request_key, tool_id, provider, micros, state, at)
      VALUES (${request.requestKey}, ${request.toolId}, ${request.provider}, ${toMicros(request.credits)}, 'billed', ${this.#now()})
      ON CONFLICT (request_key) DO UPDATE SET state = 'billed', at = excluded.at WHERE state = 'reserved'`;
    return written > 0;
  }

  /** The request was not billed (not sent, or refused by the provider): its reservation is freed. */
  release(requestKey: string): void {
    this.#sql.write`DELETE FROM spend WHERE request_key = ${requestKey} AND state = 'reserved'`;
  }

  /**
   * Sets aside up to `wantedMicros` for an executor's attempt under the cap
   * (one reservation per attempt, grown by each grant): its bills are
   * reported later and replace it ({@link settleGrant}). Answers what was
   * granted (0 when the cap leaves nothing).
   */
  grant(attemptId: string, wantedMicros: number, capMicros: number | null): number {
    const granted = capMicros === null ? wantedMicros : Math.max(0, Math.min(wantedMicros, capMicros - this.committedMicros()));
    if (granted <= 0) return 0;
    this.#sql.write`INSERT INTO spend (request_key, tool_id, provider, micros, state, at)
      VALUES (${grantKey(attemptId)}, '(grant)', '(grant)', ${granted}, 'reserved', ${this.#now()})
      ON CONFLICT (request_key) DO UPDATE SET micros = micros + excluded.micros`;
    return granted;
  }

  /** The attempt's bills, `micros` in all, were recorded: its grant shrinks by as much. */
  settleGrant(attemptId: string, micros: number): void {
    this.#sql.write`UPDATE spend SET micros = max(0, micros - ${micros}) WHERE request_key = ${grantKey(attemptId)} AND state = 'reserved'`;
  }

  /** The attempt ended: what it was granted and did not bill is freed. */
  releaseGrant(attemptId: string): void {
    this.release(grantKey(attemptId));
  }

  /** The run ended: reservations of requests that never came back are freed (a later run that completes them pays). */
  releaseAll(): void {
    this.#sql.write`DELETE FROM spend WHERE state = 'reserved'`;
  }

  /** Reserved and billed, in micro-credits: what the cap is checked against. */
  committedMicros(): number {
    return this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM spend`[0]!.n;
  }

  billedMicros(): number {
    return this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM spend WHERE state = 'billed'`[0]!.n;
  }

  /** Billed requests and micro-credits per tool (a play's history). */
  billedByTool(): { tool: string; calls: number; micros: number }[] {
    return this.#sql<{ tool: string; calls: number; micros: number }>`SELECT tool_id AS tool, count(*) AS calls, sum(micros) AS micros
      FROM spend WHERE state = 'billed' GROUP BY tool_id`;
  }

  totals(): SpendTotals {
    const rows = this.#sql<{ tool_id: string; provider: string; micros: number }>`SELECT tool_id, provider, sum(micros) AS micros
      FROM spend WHERE state = 'billed' GROUP BY tool_id, provider`;
    const totals: SpendTotals = { total: 0, byProvider: {}, byTool: {} };
    let total = 0;
    for (const row of rows) {
      total += row.micros;
      totals.byProvider[row.provider] = toCredits((totals.byProvider[row.provider] ?? 0) * MICROS + row.micros);
      totals.byTool[row.tool_id] = toCredits((totals.byTool[row.tool_id] ?? 0) * MICROS + row.micros);
    }
    totals.total = toCredits(total);
    return totals;
  }

  /** Billed requests not reported to the org yet, summed per UTC day and provider. */
  unreported(): SpendReport | null {
    const upTo = this.#sql<{ n: number | null }>`SELECT max(rowid) AS n FROM spend WHERE state = 'billed' AND reported = 0`[0]!.n;
    if (upTo === null) return null;
    const days = this.#sql<{ day: string; provider: string; micros: number }>`SELECT strftime('%Y-%m-%d', at / 1000, 'unixepoch') AS day,
      provider, sum(micros) AS micros FROM spend WHERE state = 'billed' AND reported = 0 AND rowid <= ${upTo} GROUP BY day, provider`;
    return { upTo, days };
  }

  markReported(upTo: number): void {
    this.#sql.write`UPDATE spend SET reported = 1 WHERE state = 'billed' AND reported = 0 AND rowid <= ${upTo}`;
  }
}

function grantKey(attemptId: string): string {
  return `grant:${attemptId}`;
}
