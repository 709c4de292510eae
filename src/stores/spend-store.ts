/**
 * A run's spend, kept in its coordinator (the table is created by the run
 * schema): one row per billable provider request (a call or a batch member,
 * keyed by the idempotency key sent with it), reserved before it is sent and
 * billed once the provider answered it. The run's cap is checked against
 * everything reserved or billed, so it holds however many chunks and batches
 * are in flight; a reservation whose request was not billed is released.
 *
 * Credits are kept as integer micro-credits, so sums are exact. The sums
 * per tool, provider and state are kept as the rows change (`spend_totals`):
 * a large run has millions of rows, too many to add up on every read.
 *
 * Each bill takes the next place in the order of billing (`billed_seq`); the
 * org is told of bills by range of places (`spend_report.up_to`: the place it
 * has counted up to), so a report repeated after its answer was lost, or a
 * bill made while a report was on its way, is counted exactly once.
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

/** Billed spend not yet added to the org's daily totals: the bills at places `from` (exclusive) to `upTo`, by day and provider. */
export interface SpendReport {
  from: number;
  upTo: number;
  days: { day: string; provider: string; micros: number }[];
}

/** What a spend row counts for in `spend_totals`. */
interface Counted {
  tool_id: string;
  provider: string;
  micros: number;
}

type SpendState = "reserved" | "billed";

export class SpendStore {
  #sql: Sql;
  #now: () => number;
  /** The last place given to a bill (null until the first is given: see {@link #nextSeq}). */
  #seq: number | null = null;

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
    this.#count({ tool_id: request.toolId, provider: request.provider, micros }, "reserved", 1);
    return true;
  }

  /** The provider answered the request: its reservation is now spend. Idempotent. */
  bill(requestKey: string): void {
    const reserved = this.#reserved(requestKey);
    if (!reserved) return;
    this.#sql
      .write`UPDATE spend SET state = 'billed', at = ${this.#now()}, billed_seq = ${this.#nextSeq()} WHERE request_key = ${requestKey}`;
    this.#count(reserved, "reserved", -1);
    this.#count(reserved, "billed", 1);
  }

  /** The request was billed though its bill was not recorded (see `SpendLedger.recordBilled`): spend, reserved or not. True when this recorded it. */
  recordBilled(request: SpendRequest): boolean {
    const found = this.#sql<{ state: SpendState }>`SELECT state FROM spend WHERE request_key = ${request.requestKey}`[0];
    if (found?.state === "billed") return false;
    if (found) {
      this.bill(request.requestKey);
      return true;
    }
    const micros = toMicros(request.credits);
    this.#sql.write`INSERT INTO spend (request_key, tool_id, provider, micros, state, at, billed_seq)
      VALUES (${request.requestKey}, ${request.toolId}, ${request.provider}, ${micros}, 'billed', ${this.#now()}, ${this.#nextSeq()})`;
    this.#count({ tool_id: request.toolId, provider: request.provider, micros }, "billed", 1);
    return true;
  }

  /** The request was not billed (not sent, or refused by the provider): its reservation is freed. */
  release(requestKey: string): void {
    const reserved = this.#reserved(requestKey);
    if (!reserved) return;
    this.#sql.write`DELETE FROM spend WHERE request_key = ${requestKey}`;
    this.#count(reserved, "reserved", -1);
  }

  #reserved(requestKey: string): Counted | undefined {
    return this.#sql<Counted & Record<string, SqlStorageValue>>`SELECT tool_id, provider, micros FROM spend
      WHERE request_key = ${requestKey} AND state = 'reserved'`[0];
  }

  /** Adds `calls` rows like `row` (negative: removes them) to the sums of `state`. */
  #count(row: Counted, state: SpendState | "children", calls: number, micros = calls * row.micros): void {
    this.#sql.write`INSERT INTO spend_totals (tool_id, provider, state, calls, micros)
      VALUES (${row.tool_id}, ${row.provider}, ${state}, ${calls}, ${micros})
      ON CONFLICT (tool_id, provider, state) DO UPDATE SET calls = calls + excluded.calls, micros = micros + excluded.micros`;
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
    const held = this.#reserved(grantKey(attemptId));
    this.#sql.write`INSERT INTO spend (request_key, tool_id, provider, micros, state, at)
      VALUES (${grantKey(attemptId)}, '(grant)', '(grant)', ${granted}, 'reserved', ${this.#now()})
      ON CONFLICT (request_key) DO UPDATE SET micros = micros + excluded.micros`;
    this.#count({ tool_id: "(grant)", provider: "(grant)", micros: granted }, "reserved", held ? 0 : 1, granted);
    return granted;
  }

  /** Micro-credits reserved (to be billed or freed) but for the grants of the attempts `except`: from the sums, not the rows. */
  heldMicros(except: Iterable<string>): number {
    const total = this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM spend_totals WHERE state = 'reserved'`[0]!.n;
    let excluded = 0;
    for (const attemptId of except) excluded += this.#reserved(grantKey(attemptId))?.micros ?? 0;
    return total - excluded;
  }

  /** The attempt's bills, `micros` in all, were recorded: its grant shrinks by as much. */
  settleGrant(attemptId: string, micros: number): void {
    const held = this.#reserved(grantKey(attemptId));
    if (!held) return;
    const left = Math.max(0, held.micros - micros);
    this.#sql.write`UPDATE spend SET micros = ${left} WHERE request_key = ${grantKey(attemptId)}`;
    this.#count(held, "reserved", 0, left - held.micros);
  }

  /** The attempt ended: what it was granted and did not bill is freed. */
  releaseGrant(attemptId: string): void {
    this.release(grantKey(attemptId));
  }

  /** The run ended: reservations of requests that never came back are freed (a later run that completes them pays). */
  releaseAll(): void {
    this.#sql.write`DELETE FROM spend WHERE state = 'reserved'`;
    this.#sql.write`DELETE FROM spend_totals WHERE state = 'reserved'`;
  }

  /**
   * Reserved and billed, in micro-credits, and what children may spend of this run's cap (their allotments, or what
   * they spent once ended): what the cap is checked against.
   */
  committedMicros(): number {
    return this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM spend_totals`[0]!.n;
  }

  /** Reserved (to be billed or freed), in micro-credits. */
  reservedMicros(): number {
    return this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM spend_totals WHERE state = 'reserved'`[0]!.n;
  }

  /** What this run's children may spend of its cap (allotted), or spent once they ended. */
  childrenMicros(): number {
    return this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM spend_totals WHERE state = 'children'`[0]!.n;
  }

  /** What children that have not ended, but for those `except`, were allotted. */
  allottedToOthers(except: readonly string[]): number {
    const running = this.#sql<{ child_run_id: string; micros: number }>`SELECT child_run_id, micros FROM child_spend WHERE ended = 0`;
    const skip = new Set(except);
    return running.reduce((sum, child) => (skip.has(child.child_run_id) ? sum : sum + child.micros), 0);
  }

  /** What the child was allotted (or spent, once `ended`); null when it was allotted nothing. */
  childAllotment(childRunId: string): { micros: number; ended: boolean } | null {
    const row = this.#sql<{ micros: number; ended: number }>`SELECT micros, ended FROM child_spend WHERE child_run_id = ${childRunId}`[0];
    return row ? { micros: row.micros, ended: row.ended === 1 } : null;
  }

  /** The child may spend `micros` more of this run's cap (the caller checked the cap). */
  allotChild(childRunId: string, micros: number): void {
    this.#sql.write`INSERT INTO child_spend (child_run_id, micros) VALUES (${childRunId}, ${micros})
      ON CONFLICT (child_run_id) DO UPDATE SET micros = micros + excluded.micros`;
    this.#count(CHILDREN, "children", 0, micros);
  }

  /**
   * The child ended having spent `micros` (its own and its children's): that replaces its allotment. Told again
   * (bills that reached it after its end), the larger count stands: a message told twice, or out of order, counts
   * once. But for a `provisional` figure, which counts allotments the child's own children held (a child cancelled
   * that went on for another parent, say): any figure that is not replaces it, lower or not, and a provisional one
   * never replaces one that is not. True when the count changed.
   */
  childEnded(childRunId: string, micros: number, provisional = false): boolean {
    const held = this.#sql<{ micros: number; ended: number; provisional: number }>`SELECT micros, ended, provisional
      FROM child_spend WHERE child_run_id = ${childRunId}`[0];
    // Of two figures alike the larger stands; of two unlike, the one that counts no allotment.
    const alike = held?.provisional === (provisional ? 1 : 0);
    if (held?.ended === 1 && (alike ? micros <= held.micros : provisional)) return false;
    this.#sql
      .write`INSERT INTO child_spend (child_run_id, micros, ended, provisional) VALUES (${childRunId}, ${micros}, 1, ${provisional ? 1 : 0})
      ON CONFLICT (child_run_id) DO UPDATE SET micros = excluded.micros, ended = 1, provisional = excluded.provisional`;
    this.#count(CHILDREN, "children", 0, micros - (held?.micros ?? 0));
    return true;
  }

  /** {@link childEnded} for a child this run allotted some of its cap; false (nothing counted) for any other. */
  childSpent(childRunId: string, micros: number, provisional?: boolean): boolean {
    return this.childAllotment(childRunId) !== null && this.childEnded(childRunId, micros, provisional);
  }

  /** {@link childSpent} as a child told its end (credits; none when its end was read from its view). */
  childToldEnd(end: { childRunId: string; spentCredits?: number | undefined; spentProvisional?: boolean | undefined }): boolean {
    return end.spentCredits !== undefined && this.childSpent(end.childRunId, toMicros(end.spentCredits), end.spentProvisional);
  }

  /** Whether what this run counts of its children counts allotments: a child's still running, or one a child held. */
  countsAllotments(): boolean {
    return this.#sql`SELECT 1 FROM child_spend WHERE ended = 0 OR provisional = 1 LIMIT 1`.length > 0;
  }

  /** What this run spent, its children's spend (or allotments, while they run) included. */
  spentWithChildrenMicros(): number {
    return this.billedMicros() + this.childrenMicros();
  }

  /**
   * A run that spends from a parent's cap: what it may spend in all, what the parent allotting to it now allotted
   * it and what the parents before counted of its spend (null: no parent's cap is its own).
   */
  parentAllotment(): number | null {
    const micros = this.#sql<{ micros: number }>`SELECT micros FROM parent_allotment WHERE id = 1`[0]?.micros;
    return micros === undefined ? null : micros + (this.allotmentSource()?.baseMicros ?? 0);
  }

  /** This run spends from its parent's cap, or the parent allotting to it now allotted it `micros` in all (it only grows). */
  setParentAllotment(micros: number): void {
    this.#sql.write`INSERT INTO parent_allotment (id, micros) VALUES (1, ${micros})
      ON CONFLICT (id) DO UPDATE SET micros = max(micros, excluded.micros)`;
  }

  /**
   * The parent allotting to this run, once it is not the one that started it, and what the parents that allotted
   * to it before counted of its spend, as final (null: the parent that started it allots, or none does).
   */
  allotmentSource(): { parentRunId: string; baseMicros: number } | null {
    const row = this.#sql<{
      parent_run_id: string;
      base_micros: number;
    }>`SELECT parent_run_id, base_micros FROM allotment_source WHERE id = 1`[0];
    return row ? { parentRunId: row.parent_run_id, baseMicros: row.base_micros } : null;
  }

  /**
   * From now on `parentRunId` allots to this run, from nothing (`capped` false: it spends under no parent's cap),
   * and the parents before it counted `baseMicros` of its spend.
   */
  moveAllotment(parentRunId: string, baseMicros: number, capped: boolean): void {
    this.#sql.write`INSERT INTO allotment_source (id, parent_run_id, base_micros) VALUES (1, ${parentRunId}, ${baseMicros})
      ON CONFLICT (id) DO UPDATE SET parent_run_id = excluded.parent_run_id, base_micros = excluded.base_micros`;
    if (capped) this.#sql.write`INSERT INTO parent_allotment (id, micros) VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET micros = 0`;
    else this.#sql.write`DELETE FROM parent_allotment`;
  }

  /** What the run spent that can no longer change: billed, and what its ended children spent. */
  settledMicros(): number {
    const ended = this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM child_spend WHERE ended = 1`[0]!.n;
    return this.billedMicros() + ended;
  }

  billedMicros(): number {
    return this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM spend_totals WHERE state = 'billed'`[0]!.n;
  }

  /** Billed requests and micro-credits per tool (a play's history). */
  billedByTool(): { tool: string; calls: number; micros: number }[] {
    return this.#sql<{ tool: string; calls: number; micros: number }>`SELECT tool_id AS tool, sum(calls) AS calls, sum(micros) AS micros
      FROM spend_totals WHERE state = 'billed' GROUP BY tool_id`;
  }

  totals(): SpendTotals {
    const rows = this.#sql<{ tool_id: string; provider: string; micros: number }>`SELECT tool_id, provider, micros
      FROM spend_totals WHERE state = 'billed'`;
    // Summed in micro-credits, each converted once: credits added as floats show noise (1.0019999999999998).
    const byProvider: Record<string, number> = {};
    const byTool: Record<string, number> = {};
    let total = 0;
    for (const row of rows) {
      total += row.micros;
      byProvider[row.provider] = (byProvider[row.provider] ?? 0) + row.micros;
      byTool[row.tool_id] = (byTool[row.tool_id] ?? 0) + row.micros;
    }
    const credits = (sums: Record<string, number>) => Object.fromEntries(Object.entries(sums).map(([k, v]) => [k, toCredits(v)]));
    return { total: toCredits(total), byProvider: credits(byProvider), byTool: credits(byTool) };
  }

  /** Billed requests not reported to the org yet (past its place), summed per UTC day and provider. */
  unreported(): SpendReport | null {
    const from = this.reportedUpTo();
    const upTo = this.#lastSeq();
    if (upTo <= from) return null;
    const days = this.#sql<{ day: string; provider: string; micros: number }>`SELECT strftime('%Y-%m-%d', at / 1000, 'unixepoch') AS day,
      provider, sum(micros) AS micros FROM spend INDEXED BY spend_billed_seq
      WHERE billed_seq > ${from} AND billed_seq <= ${upTo} GROUP BY day, provider`;
    return { from, upTo, days };
  }

  /** Micro-credits billed and not yet counted by the org. */
  unreportedMicros(): number {
    return this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM spend INDEXED BY spend_billed_seq
      WHERE billed_seq > ${this.reportedUpTo()}`[0]!.n;
  }

  /** The place the org has counted this run's bills up to. */
  reportedUpTo(): number {
    return this.#sql<{ up_to: number }>`SELECT up_to FROM spend_report WHERE id = 1`[0]?.up_to ?? 0;
  }

  /** The org has counted the bills up to place `upTo` (it only grows). */
  markReported(upTo: number): void {
    this.#sql.write`INSERT INTO spend_report (id, up_to) VALUES (1, ${upTo})
      ON CONFLICT (id) DO UPDATE SET up_to = max(up_to, excluded.up_to)`;
    if (this.#seq !== null && this.#seq < upTo) this.#seq = upTo;
  }

  #lastSeq(): number {
    return (
      this.#sql<{ n: number | null }>`SELECT max(billed_seq) AS n FROM spend INDEXED BY spend_billed_seq WHERE billed_seq IS NOT NULL`[0]!
        .n ?? 0
    );
  }

  /**
   * The next bill's place: past every bill, and past any place the org has
   * counted (a new bill is never taken as counted). Read from storage once,
   * then counted here: this store is its object's only writer of bills (a
   * place skipped by a write that failed is only a gap).
   */
  #nextSeq(): number {
    this.#seq = (this.#seq ?? Math.max(this.#lastSeq(), this.reportedUpTo())) + 1;
    return this.#seq;
  }
}

/** How children's allotments are counted in `spend_totals` (state `children`): in what the cap is checked against. */
const CHILDREN: Counted = { tool_id: "(children)", provider: "(children)", micros: 0 };

function grantKey(attemptId: string): string {
  return `grant:${attemptId}`;
}
