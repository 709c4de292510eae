/**
 * Which row of which chunk a provider request is for, carried across the
 * row's awaits. A pacer hands its slots to the lowest rank waiting, so a
 * chunk's rows finish one after another: first come, first served, every
 * row's first call would go before any row's second, and at 2 s a
 * 100-row chunk would finish no row for its first half minute. Chunks rank
 * in order too: an executor's next attempt, run alongside one that drains,
 * takes only the connections the older one leaves idle.
 */
import { AsyncLocalStorage } from "node:async_hooks";

const ranks = new AsyncLocalStorage<number>();

/** More than any chunk's rows (MAX_CHUNK_ROWS): the ranks of one chunk's rows all come before the next chunk's. */
const CHUNK_RANKS = 2 ** 20;

/** The rank of row `index` of chunk `chunk`. */
export function rowRank(chunk: number, index: number): number {
  return chunk * CHUNK_RANKS + index;
}

/** Runs `fn` (a row's work) with `rank` for every request it makes. */
export function withRank<T>(rank: number, fn: () => T): T {
  return ranks.run(rank, fn);
}

/** The rank of the row this code runs for; a request outside any row comes last. */
export function currentRank(): number {
  return ranks.getStore() ?? Number.POSITIVE_INFINITY;
}
