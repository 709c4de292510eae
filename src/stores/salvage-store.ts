/**
 * Salvage: provider outputs that were billed but whose receipts could not be
 * completed, kept exactly in the run's coordinator (its table is created by
 * the run schema). The run fails loudly with them in its error and its
 * `run.failed` event; afterwards its alarm keeps trying to write them into
 * their receipts, so a rerun reuses them instead of asking the provider again.
 */
import type { AttemptRef, SalvageEntry } from "../contracts/shards";
import type { Sql } from "./sql";

/** Entries listed in a run's error; past this only the counts are. */
export const MAX_SALVAGE_LISTED = 500;
/**
 * Characters of outputs the listed entries carry together: the run's error is one SQLite value (2 MB at most), so
 * entries past it are listed without their output (`outputOmitted`; written back, a rerun reuses it all the same).
 */
export const MAX_SALVAGE_LISTED_CHARS = 256 * 1024;
/** The longest error an entry lists (why its receipt could not be completed). */
const MAX_ENTRY_ERROR_CHARS = 500;
/** A finished run stops retrying its restore after this many tries (the record stays in its error). */
export const MAX_RESTORE_TRIES = 20;

/** What a run's error and terminal event carry about its salvage. */
export interface SalvageRecord {
  total: number;
  pending: number;
  restored: number;
  /** Receipts another attempt completed meanwhile: their own result stands. */
  superseded: number;
  /**
   * The entries themselves (at most {@link MAX_SALVAGE_LISTED}), exact outputs included while they fit in
   * {@link MAX_SALVAGE_LISTED_CHARS}; the others' output is null and `outputOmitted` true.
   */
  // `output` is JSON typed `any`: RPC stub types reject `unknown` (the run's error crosses RPC).
  entries: {
    receiptKey: string;
    toolId: string;
    output: any;
    outputOmitted?: true;
    completeAttempts: number;
    error: string;
    state: string;
  }[];
}

type SalvageRow = {
  receipt_key: string;
  tool_id: string;
  attempt: string;
  output: string;
  complete_attempts: number;
  error: string;
  at: number;
  state: string;
  restore_tries: number;
};

/** The salvage table of one run's coordinator. */
export class SalvageStore {
  #sql: Sql;

  constructor(options: { sql: Sql }) {
    this.#sql = options.sql;
  }

  /** Keeps an entry (the first one per receipt wins: it is the billed output); whether it was new. */
  add(entry: SalvageEntry): boolean {
    return (
      this.#sql.write`INSERT INTO salvage (receipt_key, tool_id, attempt, output, complete_attempts, error, at)
      VALUES (${entry.receiptKey}, ${entry.toolId}, ${JSON.stringify(entry.attempt)}, ${JSON.stringify(entry.output ?? null)},
        ${entry.completeAttempts}, ${entry.error.slice(0, 2000)}, ${entry.at})
      ON CONFLICT (receipt_key) DO NOTHING` > 0
    );
  }

  pendingCount(): number {
    return this.#sql<{ n: number }>`SELECT count(*) AS n FROM salvage WHERE state = 'pending'`[0]!.n;
  }

  /** How many restore tries the pending entries have had (the fewest of any: one that came late has its own tries). */
  restoreTries(): number {
    return this.#sql<{ n: number | null }>`SELECT min(restore_tries) AS n FROM salvage WHERE state = 'pending'`[0]?.n ?? 0;
  }

  record(): SalvageRecord | null {
    const counts = this.#sql<{ state: string; n: number }>`SELECT state, count(*) AS n FROM salvage GROUP BY state`;
    const total = counts.reduce((sum, c) => sum + c.n, 0);
    if (total === 0) return null;
    const of = (state: string) => counts.find((c) => c.state === state)?.n ?? 0;
    const rows = this.#sql<SalvageRow>`SELECT * FROM salvage ORDER BY at, receipt_key LIMIT ${MAX_SALVAGE_LISTED}`;
    let listed = 0;
    return {
      total,
      pending: of("pending"),
      restored: of("restored"),
      superseded: of("superseded"),
      entries: rows.map((r) => {
        // A large output left out leaves room for smaller ones after it.
        const fits = listed + r.output.length <= MAX_SALVAGE_LISTED_CHARS;
        if (fits) listed += r.output.length;
        const output = fits ? { output: JSON.parse(r.output) } : { output: null, outputOmitted: true as const };
        return {
          receiptKey: r.receipt_key,
          toolId: r.tool_id,
          ...output,
          completeAttempts: r.complete_attempts,
          error: r.error.slice(0, MAX_ENTRY_ERROR_CHARS),
          state: r.state,
        };
      }),
    };
  }

  /** The entries still to write into their receipts, oldest first, each with the attempt that claimed it. */
  pendingEntries(): { receiptKey: string; attempt: AttemptRef; output: unknown }[] {
    const rows = this.#sql<SalvageRow>`SELECT * FROM salvage WHERE state = 'pending' ORDER BY at, receipt_key`;
    return rows.map((row) => ({
      receiptKey: row.receipt_key,
      attempt: JSON.parse(row.attempt) as AttemptRef,
      output: JSON.parse(row.output),
    }));
  }

  /** Records what a restore pass did: receipts written, receipts another attempt had taken over, and one more try. */
  recordRestore(result: { restored: string[]; superseded: string[] }): void {
    this.#mark(result.restored, "restored");
    this.#mark(result.superseded, "superseded");
  }

  /** Counts one restore pass against every entry still pending. */
  countRestoreTry(): void {
    this.#sql.write`UPDATE salvage SET restore_tries = restore_tries + 1 WHERE state = 'pending'`;
  }

  #mark(keys: string[], state: "restored" | "superseded"): void {
    if (keys.length === 0) return;
    this.#sql
      .write`UPDATE salvage SET state = ${state} WHERE state = 'pending' AND receipt_key IN (SELECT value FROM json_each(${JSON.stringify(keys)}))`;
  }
}
