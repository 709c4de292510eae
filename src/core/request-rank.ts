/**
 * Which row of its chunk a provider request is for, carried across the
 * row's awaits. A pacer hands its slots to the lowest rank waiting, so a
 * chunk's rows finish one after another: first come, first served, every
 * row's first call would go before any row's second, and at 2 s a
 * 100-row chunk would finish no row for its first half minute.
 */
import { AsyncLocalStorage } from "node:async_hooks";

const ranks = new AsyncLocalStorage<number>();

/** Runs `fn` (a row's work) with `rank` for every request it makes. */
export function withRank<T>(rank: number, fn: () => T): T {
  return ranks.run(rank, fn);
}

/** The rank of the row this code runs for; a request outside any row comes last. */
export function currentRank(): number {
  return ranks.getStore() ?? Number.POSITIVE_INFINITY;
}
