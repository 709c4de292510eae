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
 * parent that started it.
 */
import { RunClient } from "../../clients/runs";
import type { RunStore } from "../../stores/run-store";
import { toMicros } from "../../stores/spend-store";

type RunsEnv = Pick<Env, "RUN_COORDINATOR">;

/** What the run's caps leave it to reserve or allot, in micro-credits (its maxSpend, its parent's allotment); null: no cap. */
export function capRoom(store: RunStore): number | null {
  const run = store.run()!;
  const allotted = store.spend.parentAllotment();
  if (run.maxSpend === null && allotted === null) return null;
  const committed = store.spend.committedMicros();
  const own = run.maxSpend === null ? Number.POSITIVE_INFINITY : toMicros(run.maxSpend) - committed;
  return Math.min(own, allotted === null ? Number.POSITIVE_INFINITY : allotted - committed);
}

/**
 * A child of this run asks for `wantedMicros` more of the run's cap (at least `needMicros`, else nothing): answers
 * what the child may spend in all. A run spending from its own parent's cap asks that parent first when short.
 */
export async function allotToChild(
  env: RunsEnv,
  store: RunStore,
  childRunId: string,
  wantedMicros: number,
  needMicros: number,
): Promise<number> {
  const held = store.spend.childAllotment(childRunId);
  if (held?.ended) return held.micros;
  const before = capRoom(store);
  if (before !== null && before < needMicros) await askParent(env, store, wantedMicros - before, needMicros - before);
  // Read again after the ask: other children's asks may have taken some meanwhile.
  const room = capRoom(store) ?? Number.POSITIVE_INFINITY;
  const extra = room >= needMicros ? Math.min(wantedMicros, room) : 0;
  if (extra > 0) store.spend.allotChild(childRunId, extra);
  return (held?.micros ?? 0) + extra;
}

/**
 * Asks the parent of a run that spends from its cap for `wantedMicros` more (at least `needMicros`); keeps the
 * new allotment. Answers whether it grew.
 */
export async function askParent(env: RunsEnv, store: RunStore, wantedMicros: number, needMicros: number): Promise<boolean> {
  const run = store.run()!;
  const held = store.spend.parentAllotment();
  if (held === null || run.parentRunId === null) return false;
  const total = await new RunClient({ env, org: run.org }).allotChildSpend(run.parentRunId, run.runId, wantedMicros, needMicros);
  store.spend.setParentAllotment(total);
  return total > held;
}
