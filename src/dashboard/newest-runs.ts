/**
 * Reading the org's newest runs, however many: `GET /v1/runs` answers at most
 * `MAX_RUNS_PER_PAGE` a page, so more are read by following `nextCursor`.
 * Pure: the list call is given.
 *
 * Relative imports name their .ts file: the node-side tests import this module.
 */
import type { RunList } from "../client/index.ts";

/** The most runs `GET /v1/runs` answers in one page. */
export const MAX_RUNS_PER_PAGE = 200;

/** `TroupeClient.list`, or anything that answers as `GET /v1/runs` does. */
export type ListRuns = (options: { limit: number; cursor?: string }) => Promise<RunList>;

/** The `count` newest runs (fewer when the org has fewer), and whether older ones remain. */
export async function readNewestRuns(list: ListRuns, count: number): Promise<{ runs: RunList["runs"]; more: boolean }> {
  const runs: RunList["runs"] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await list({ limit: Math.min(count - runs.length, MAX_RUNS_PER_PAGE), cursor });
    runs.push(...page.runs);
    if (page.nextCursor === null || page.runs.length === 0) return { runs, more: false };
    if (runs.length >= count) return { runs, more: true };
    cursor = page.nextCursor;
  }
}
