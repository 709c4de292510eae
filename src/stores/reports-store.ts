/**
 * The last report applied of each executor's reporter (AttemptReport.seq), in
 * the run's coordinator (its table is created by the run schema): a report
 * sent again because its answer was lost is applied once.
 */
import type { Sql } from "./sql";

export class ReportsStore {
  #sql: Sql;
  #now: () => number;

  constructor(options: { sql: Sql; now: () => number }) {
    this.#sql = options.sql;
    this.#now = options.now;
  }

  /** Whether report `seq` of `reporter` (or a later one of it) was applied. */
  applied(reporter: string, seq: number): boolean {
    const last = this.#sql<{ seq: number }>`SELECT seq FROM reports_applied WHERE reporter = ${reporter}`[0];
    return last !== undefined && last.seq >= seq;
  }

  /** Report `seq` of `reporter` is applied, all of it. */
  record(reporter: string, seq: number): void {
    this.#sql.write`INSERT INTO reports_applied (reporter, seq, at) VALUES (${reporter}, ${seq}, ${this.#now()})
      ON CONFLICT (reporter) DO UPDATE SET seq = excluded.seq, at = excluded.at`;
  }

  /** Forgets reporters not heard from since `before`: none sends a report again that late. */
  forget(before: number): void {
    this.#sql.write`DELETE FROM reports_applied WHERE at < ${before}`;
  }
}
