/**
 * Finalize of a map: after its last chunk, the rows readable in the sheets
 * must be every planned row, each terminal. The sheets are the truth: counts
 * the chunks reported give way to what is persisted (another run may have
 * rewritten a shared row since), chunks with rows not persisted are sent back
 * (a bounded number of times), and past that the map fails with exact counts.
 * A run's result never claims a row that is not persisted.
 */
import type { ChunkRecord } from "../../stores/run-store";

/** A chunk's rows in the sheets, by status. */
export interface PersistedCounts {
  total: number;
  completed: number;
  failed: number;
}

/** What finalize does next. */
export type FinalizePlan =
  /** Every row is persisted; `adjust` lists chunks whose reported counts differ from the sheets. */
  | { kind: "done"; adjust: { idx: number; completed: number; failed: number }[] }
  /** Some rows are not persisted: run these chunks again. */
  | { kind: "repair"; chunks: number[]; missing: number }
  | { kind: "fail"; message: string };

/** The map's plan and what the sheets hold, per chunk. */
export interface FinalizeInput {
  map: string;
  total: number;
  chunks: readonly ChunkRecord[];
  /** Persisted rows per chunk index (absent: none). */
  persisted: ReadonlyMap<number, PersistedCounts>;
  /** Repairs already made, and the most allowed. */
  repairs: number;
  maxRepairs: number;
}

/** Decides finalize from the chunk plan and the rows the sheets hold. Pure. */
export function planFinalize(input: FinalizeInput): FinalizePlan {
  const short: number[] = [];
  const adjust: { idx: number; completed: number; failed: number }[] = [];
  let completed = 0;
  let failed = 0;
  let members = 0;
  let reportedCompleted = 0;
  let reportedFailed = 0;
  for (const chunk of input.chunks) {
    const rows = input.persisted.get(chunk.idx) ?? { total: 0, completed: 0, failed: 0 };
    completed += rows.completed;
    failed += rows.failed;
    members += rows.total;
    reportedCompleted += chunk.completed;
    reportedFailed += chunk.failed;
    if (rows.total !== chunk.rows || rows.completed + rows.failed !== chunk.rows) short.push(chunk.idx);
    else if (rows.completed !== chunk.completed || rows.failed !== chunk.failed)
      adjust.push({ idx: chunk.idx, completed: rows.completed, failed: rows.failed });
  }
  const planned = new Set(input.chunks.map((c) => c.idx));
  const strays = [...input.persisted.keys()].filter((idx) => !planned.has(idx));
  if (strays.length) {
    return {
      kind: "fail",
      message: `map "${input.map}": the sheets hold rows of this run at input positions past its ${input.total} planned rows (chunks ${strays.slice(0, 5).join(", ")}); the dataset does not match the plan`,
    };
  }
  if (short.length === 0) return { kind: "done", adjust };
  const missing = input.total - completed - failed;
  if (input.repairs >= input.maxRepairs) {
    return {
      kind: "fail",
      message:
        `map "${input.map}": after ${input.repairs} repairs the sheets hold ${completed} completed and ${failed} failed of ${input.total} rows ` +
        `(${members - completed - failed} unfinished, ${input.total - members} never claimed, in chunks ${sample(short)}), ` +
        `but the chunks reported ${reportedCompleted} completed and ${reportedFailed} failed; a rerun executes the ${missing} rows not persisted`,
    };
  }
  return { kind: "repair", chunks: short, missing };
}

function sample(items: readonly number[]): string {
  return items.length > 5 ? `${items.slice(0, 5).join(", ")}, …` : items.join(", ");
}
