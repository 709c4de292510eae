/**
 * A capped run's children spend from its cap. A run with a cap (its own
 * `maxSpend`, or what its parent allotted it) starts its children with
 * nothing of their own to spend: each asks its parent for an allotment as it
 * needs one, more each time, and the parent grants it out of what its cap
 * leaves (its own bills and reservations and every child's allotment
 * counted). A child that ends tells its parent what it spent, which replaces
 * its allotment. A run and all its descendants never bill past its cap.
 *
 * A child another parent's same call reuses spends from the cap of the
 * parent that started it. A run that is ending (cancelled, past its runtime
 * limit, or carrying out an end it decided) allots no more: a child whose
 * cancel failed spends only what it already holds.
 */
import { RunClient } from "../../clients/runs";
import { isTerminal } from "../../core/statuses";
import type { ChildAllotment } from "../../contracts/runs";
import type { RunStore } from "../../stores/run-store";
import { toMicros } from "../../stores/spend-store";

type RunsEnv = Pick<Env, "RUN_COORDINATOR">;

/** Whether the run spends under a cap of its own or its parent's: its children then spend from it. */
export function capsItsChildren(store: RunStore): boolean {
  return store.run()!.maxSpend !== null || store.spend.parentAllotment() !== null;
}

/** What the run's caps leave it to reserve or allot, in micro-credits (its maxSpend, its parent's allotment); null: no cap. */
function capRoom(store: RunStore): number | null {
  if (!capsItsChildren(store)) return null;
  const run = store.run()!;
  const allotted = store.spend.parentAllotment();
  const committed = store.spend.committedMicros();
  const own = run.maxSpend === null ? Number.POSITIVE_INFINITY : toMicros(run.maxSpend) - committed;
  return Math.min(own, allotted === null ? Number.POSITIVE_INFINITY : allotted - committed);
}

/** A child refused that asks again within this long is waiting (it asks every 250 ms): its allotment is not awaited. */
const WAITING_FOR_MS = 1_000;

/**
 * A child of this run asks for `wantedMicros` more of the run's cap (at least `needMicros`, else nothing): answers
 * what the child may spend in all. Past what it needs, a child gets at most half of what the cap leaves, so that
 * its siblings find room too. A run spending from its own parent's cap asks that parent first when short. An ended
 * run, or one ending, allots no more (what an ended one had left went back to its own parent). A child refused waits while siblings not
 * themselves waiting hold allotments (`waiting`: when each child refused last asked; kept by the caller).
 */
export async function allotToChild(
  env: RunsEnv,
  store: RunStore,
  childRunId: string,
  wantedMicros: number,
  needMicros: number,
  waiting: Map<string, number>,
  now: number,
): Promise<ChildAllotment> {
  const held = store.spend.childAllotment(childRunId);
  const run = store.run()!;
  const ending = run.cancelRequested || run.deadlineAt <= now || store.ending() !== null;
  if (held?.ended || isTerminal(run.status) || ending) return { micros: held?.micros ?? 0, wait: false };
  const before = capRoom(store);
  let above = { grew: false, wait: false };
  if (before !== null && before < needMicros) above = await askParent(env, store, wantedMicros - before, needMicros - before);
  // Read again after the ask: other children's asks may have taken some meanwhile.
  const room = capRoom(store) ?? Number.POSITIVE_INFINITY;
  const extra = room >= needMicros ? Math.min(wantedMicros, needMicros + Math.floor((room - needMicros) / 2)) : 0;
  if (extra > 0) {
    store.spend.allotChild(childRunId, extra);
    waiting.delete(childRunId);
  } else waiting.set(childRunId, now);
  for (const [child, at] of waiting) if (now - at > WAITING_FOR_MS) waiting.delete(child);
  const wait = extra === 0 && (store.spend.allottedToOthers([...waiting.keys()]) > 0 || above.wait);
  return { micros: (held?.micros ?? 0) + extra, wait };
}

/**
 * Asks the parent of a run that spends from its cap for `wantedMicros` more (at least `needMicros`); keeps the
 * new allotment. Answers whether it grew, and whether the parent says to wait for more.
 */
export async function askParent(
  env: RunsEnv,
  store: RunStore,
  wantedMicros: number,
  needMicros: number,
): Promise<{ grew: boolean; wait: boolean }> {
  const run = store.run()!;
  const held = store.spend.parentAllotment();
  if (held === null || run.parentRunId === null) return { grew: false, wait: false };
  const answer = await new RunClient({ env, org: run.org }).allotChildSpend(run.parentRunId, run.runId, wantedMicros, needMicros);
  store.spend.setParentAllotment(answer.micros);
  return { grew: answer.micros > held, wait: answer.wait };
}
