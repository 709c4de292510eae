/**
 * An org's spend, kept by its OrgDirectory: credits billed per UTC day and
 * provider (reported by each run's coordinator, idempotently), and the org's
 * daily limit. Micro-credits, so sums are exact.
 */
import { z } from "zod";
import { Credits } from "../api/contract";
import type { Sql } from "./sql";
import { toCredits, toMicros } from "./spend-store";

export const orgSpendMigration = `
  CREATE TABLE spend_days (day TEXT NOT NULL, provider TEXT NOT NULL, micros INTEGER NOT NULL, PRIMARY KEY (day, provider)) WITHOUT ROWID;
  CREATE TABLE spend_reports (run_id TEXT PRIMARY KEY, up_to INTEGER NOT NULL) WITHOUT ROWID;
  CREATE TABLE spend_limits (id INTEGER PRIMARY KEY CHECK (id = 1), daily_micros INTEGER);
  CREATE TABLE play_runs (run_id TEXT PRIMARY KEY) WITHOUT ROWID;
  CREATE TABLE play_stats (play TEXT PRIMARY KEY, runs INTEGER NOT NULL, rows_computed INTEGER NOT NULL) WITHOUT ROWID;
  CREATE TABLE play_tool_stats (play TEXT NOT NULL, tool TEXT NOT NULL, calls INTEGER NOT NULL, micros INTEGER NOT NULL, PRIMARY KEY (play, tool)) WITHOUT ROWID;`;

/**
 * What each run of the org holds of the day's limit: spend it may reserve
 * and has not reported yet (OrgSpendStore.holdDaily). Holds of past days no
 * longer count.
 */
export const dailyHoldsMigration = `
  CREATE TABLE daily_holds (run_id TEXT PRIMARY KEY, day TEXT NOT NULL, micros INTEGER NOT NULL) WITHOUT ROWID;`;

/** A hold lapses this long after it was last asked for or reset: a run that died holding room gives it back. */
export const DAILY_HOLD_TTL_MS = 20 * 60_000;

/** Holds lapse ({@link DAILY_HOLD_TTL_MS}); those stored before this had no expiry and lapse at once. */
export const dailyHoldsExpiryMigration = `ALTER TABLE daily_holds ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;`;

const DAY = /^\d{4}-\d{2}-\d{2}$/;

/**
 * A coordinator's report: its bills at places `from` (exclusive) to `upTo`
 * in the order it billed them, summed by day and provider. `from` is where it
 * believes the org's count of its bills is (absent from coordinators before
 * places: the report then only has to reach past it).
 */
export const SpendReportMessage = z.object({
  runId: z.string().min(1).max(100),
  from: z.number().int().nonnegative().optional(),
  upTo: z.number().int().nonnegative(),
  days: z
    .array(z.object({ day: z.string().regex(DAY), provider: z.string().min(1).max(64), micros: z.number().int().nonnegative() }))
    .max(1000),
});
export type SpendReportMessage = z.infer<typeof SpendReportMessage>;

/** `PUT /v1/spend/limits`: the org's daily cap in credits, or null for none. */
export const SpendLimits = z.object({ dailyCredits: Credits.nullable() }).strict();
export type SpendLimits = z.infer<typeof SpendLimits>;

/** The daily limit and what today (UTC) has billed so far. */
export interface DailyBudget {
  dailyCredits: number | null;
  spentToday: number;
}

/** Whether today has billed the whole daily limit: no run starts. */
export function pastDailyLimit({ dailyCredits, spentToday }: DailyBudget): boolean {
  return dailyCredits !== null && spentToday >= dailyCredits;
}

/** What a completed run of a play computed and billed: the history estimates learn from. */
export const PlayStatsMessage = z.object({
  runId: z.string().min(1).max(100),
  play: z.string().min(1).max(64),
  rowsComputed: z.number().int().nonnegative(),
  tools: z
    .array(z.object({ tool: z.string().min(1).max(64), calls: z.number().int().nonnegative(), micros: z.number().int().nonnegative() }))
    .max(200),
});
export type PlayStatsMessage = z.infer<typeof PlayStatsMessage>;

/** A play's history over its completed runs: rows computed, and each tool's billed requests and micro-credits. */
export interface PlayStats {
  runs: number;
  rowsComputed: number;
  tools: Record<string, { calls: number; micros: number }>;
}

/** One day of an org's spend, in credits, by provider. */
export interface SpendDay {
  day: string;
  total: number;
  byProvider: Record<string, number>;
}

export class OrgSpendStore {
  #sql: Sql;

  constructor(options: { sql: Sql }) {
    this.#sql = options.sql;
  }

  /**
   * Adds a run's report once, and answers the place the org has counted the
   * run's bills up to. A report that ends at or below it changes nothing
   * (repeated after its answer was lost); one that starts below it is
   * refused, as part of it was counted already: the coordinator sends the
   * bills past the answer again.
   */
  record(report: SpendReportMessage): number {
    const last = this.#sql<{ up_to: number }>`SELECT up_to FROM spend_reports WHERE run_id = ${report.runId}`[0]?.up_to ?? 0;
    if (report.upTo <= last || (report.from !== undefined && report.from < last)) return last;
    for (const { day, provider, micros } of report.days) {
      this.#sql.write`INSERT INTO spend_days (day, provider, micros) VALUES (${day}, ${provider}, ${micros})
        ON CONFLICT (day, provider) DO UPDATE SET micros = micros + excluded.micros`;
    }
    this.#sql.write`INSERT INTO spend_reports (run_id, up_to) VALUES (${report.runId}, ${report.upTo})
      ON CONFLICT (run_id) DO UPDATE SET up_to = excluded.up_to`;
    return report.upTo;
  }

  /** Days from `from` to `to` (inclusive, YYYY-MM-DD), oldest first; days without spend are absent. */
  days(from: string, to: string): SpendDay[] {
    const byDay = new Map<string, SpendDay>();
    for (const row of this.#sql<{ day: string; provider: string; micros: number }>`SELECT day, provider, micros FROM spend_days
        WHERE day >= ${from} AND day <= ${to} ORDER BY day, provider`) {
      const day = byDay.get(row.day) ?? { day: row.day, total: 0, byProvider: {} };
      day.byProvider[row.provider] = toCredits(row.micros);
      day.total = toCredits(toMicros(day.total) + row.micros);
      byDay.set(row.day, day);
    }
    return [...byDay.values()];
  }

  /** Credits billed on `day` (reported so far). */
  dayTotal(day: string): number {
    return toCredits(this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM spend_days WHERE day = ${day}`[0]!.n);
  }

  /** Adds a completed run to its play's history, once. */
  recordPlay(stats: PlayStatsMessage): void {
    if (this.#sql.write`INSERT INTO play_runs (run_id) VALUES (${stats.runId}) ON CONFLICT (run_id) DO NOTHING` === 0) return;
    this.#sql.write`INSERT INTO play_stats (play, runs, rows_computed) VALUES (${stats.play}, 1, ${stats.rowsComputed})
      ON CONFLICT (play) DO UPDATE SET runs = runs + 1, rows_computed = rows_computed + excluded.rows_computed`;
    for (const { tool, calls, micros } of stats.tools) {
      this.#sql.write`INSERT INTO play_tool_stats (play, tool, calls, micros) VALUES (${stats.play}, ${tool}, ${calls}, ${micros})
        ON CONFLICT (play, tool) DO UPDATE SET calls = calls + excluded.calls, micros = micros + excluded.micros`;
    }
  }

  playStats(play: string): PlayStats {
    const head = this.#sql<{ runs: number; rows_computed: number }>`SELECT runs, rows_computed FROM play_stats WHERE play = ${play}`[0];
    const tools: PlayStats["tools"] = {};
    for (const row of this.#sql<{
      tool: string;
      calls: number;
      micros: number;
    }>`SELECT tool, calls, micros FROM play_tool_stats WHERE play = ${play}`) {
      tools[row.tool] = { calls: row.calls, micros: row.micros };
    }
    return { runs: head?.runs ?? 0, rowsComputed: head?.rows_computed ?? 0, tools };
  }

  /**
   * Sets aside more of the day's limit for `runId`, so that the org's runs
   * together never reserve past it: what the day has billed (reported) and
   * every run's live hold stay under the limit. Grants `wantedMicros`, or
   * what is left if less; but past `needMicros`, at most half of what is
   * left, so that the org's other runs find room too. Answers what was
   * granted (0 when the day has nothing left; all of it without a limit). A hold lapses {@link DAILY_HOLD_TTL_MS} after
   * its last ask, and ends when its run's spend is reported ({@link resetDaily}).
   */
  holdDaily(runId: string, at: number, wantedMicros: number, needMicros = wantedMicros): number {
    const limit = this.#sql<{ daily_micros: number | null }>`SELECT daily_micros FROM spend_limits WHERE id = 1`[0]?.daily_micros ?? null;
    if (limit === null) return wantedMicros;
    const day = utcDay(at);
    this.#sql.write`DELETE FROM daily_holds WHERE day < ${day} OR expires_at <= ${at}`;
    const spent = this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM spend_days WHERE day = ${day}`[0]!.n;
    const held = this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM daily_holds WHERE day = ${day}`[0]!.n;
    const left = Math.max(0, limit - spent - held);
    const granted = Math.min(wantedMicros, left, Math.max(needMicros, Math.floor(left / 2)));
    if (granted <= 0) return 0;
    this.#sql
      .write`INSERT INTO daily_holds (run_id, day, micros, expires_at) VALUES (${runId}, ${day}, ${granted}, ${at + DAILY_HOLD_TTL_MS})
      ON CONFLICT (run_id) DO UPDATE SET micros = CASE WHEN day = excluded.day THEN micros + excluded.micros ELSE excluded.micros END,
        day = excluded.day, expires_at = excluded.expires_at`;
    return granted;
  }

  /**
   * The run's spend is reported: its hold becomes `keepMicros`, what it still
   * has reserved and not billed (requests in flight, grants of its executors'
   * attempts), or ends when that is 0.
   */
  resetDaily(runId: string, at: number, keepMicros = 0): void {
    if (keepMicros <= 0) return void this.#sql.write`DELETE FROM daily_holds WHERE run_id = ${runId}`;
    this.#sql
      .write`INSERT INTO daily_holds (run_id, day, micros, expires_at) VALUES (${runId}, ${utcDay(at)}, ${keepMicros}, ${at + DAILY_HOLD_TTL_MS})
      ON CONFLICT (run_id) DO UPDATE SET micros = excluded.micros, day = excluded.day, expires_at = excluded.expires_at`;
  }

  /** What the org's runs hold of `day`'s limit at `at`. */
  heldOn(day: string, at: number): number {
    return toCredits(
      this.#sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM daily_holds WHERE day = ${day} AND expires_at > ${at}`[0]!.n,
    );
  }

  limits(): SpendLimits {
    const micros = this.#sql<{ daily_micros: number | null }>`SELECT daily_micros FROM spend_limits WHERE id = 1`[0]?.daily_micros ?? null;
    return { dailyCredits: micros === null ? null : toCredits(micros) };
  }

  setLimits(limits: SpendLimits): SpendLimits {
    const micros = limits.dailyCredits === null ? null : toMicros(limits.dailyCredits);
    this.#sql
      .write`INSERT INTO spend_limits (id, daily_micros) VALUES (1, ${micros}) ON CONFLICT (id) DO UPDATE SET daily_micros = excluded.daily_micros`;
    return this.limits();
  }
}

/** The UTC day of an epoch-ms instant, as YYYY-MM-DD. */
export function utcDay(at: number): string {
  return new Date(at).toISOString().slice(0, 10);
}
