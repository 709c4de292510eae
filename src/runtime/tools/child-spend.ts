/**
 * A capped run's children spend from its cap. A run with a cap (its own
 * `maxSpend`, or what its parent allotted it) starts its children with
 * nothing of their own to spend: each asks its parent for an allotment as it
 * needs one, more each time, and the parent grants it out of what its cap
 * leaves (its own bills and reservations and every child's allotment
 * counted). A child that ends tells its parent what it spent, which replaces
 * its allotment: a parent that cancelled it too (run-links.ts tellParents).
 * A run and all its descendants never bill past its cap.
 *
 * A child another parent's same call reuses spends from the cap of the
 * parent that started it while that parent waits on it. A run that is ending
 * (cancelled, past its runtime limit, or carrying out an end it decided)
 * allots no more. When the parent allotting to a child gives it up (cancels
 * it, as its own cancel, failure or runtime limit does) while another parent
 * still waits on it, the child goes on and moves to that parent's cap
 * ({@link moveAllotment}): it tells the first parent what it spent so far,
 * which that parent counts as final (told again by the child's alarm until
 * it is told: {@link tellMoves}), and asks the other for allotments from
 * then on (that parent uncapped, the child is uncapped too). A child whose
 * cancel failed, with no other parent waiting, spends only what it holds.
 */
import { type FaultProbe, faultProbeFor } from "../../clients/faults";
import { RunClient } from "../../clients/runs";
import { isTerminal } from "../../core/statuses";
import type { ChildAllotment } from "../../contracts/runs";
import type { JournalStore } from "../../stores/journal-store";
import type { RunStore } from "../../stores/run-store";
import { toMicros } from "../../stores/spend-store";

type RunsEnv = Pick<Env, "RUN_COORDINATOR" | "FAULTS" | "TROUPE_TEST_MODE">;

/** What a run's asks of its parents and answers to its children go through: its coordinator's stores. */
export interface SpendLinks {
  env: RunsEnv;
  store: RunStore;
  /** The parents waiting on the run (its watchers). */
  journal: JournalStore;
  /** Runs the run's alarm soon: it tells again what could not be told ({@link tellMoves}). */
  wake(): Promise<void>;
}

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
  links: SpendLinks,
  childRunId: string,
  wantedMicros: number,
  needMicros: number,
  waiting: Map<string, number>,
  now: number,
): Promise<ChildAllotment> {
  const { store } = links;
  const held = store.spend.childAllotment(childRunId);
  const run = store.run()!;
  const ending = run.cancelRequested || run.deadlineAt <= now || store.ending() !== null;
  if (held?.ended || isTerminal(run.status) || ending) return { micros: held?.micros ?? 0, wait: false, ended: true };
  const before = capRoom(store);
  // Only a child that moved here from another parent's cap asks a run that has none (child-spend's moveAllotment).
  if (before === null) return { micros: held?.micros ?? 0, wait: false, uncapped: true };
  let above = { grew: false, wait: false };
  if (before < needMicros) above = await askParent(links, wantedMicros - before, needMicros - before);
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

/** The parent allotting to the run now (the one that started it, unless it moved: {@link moveAllotment}). */
function allotter(store: RunStore): string | null {
  return store.spend.allotmentSource()?.parentRunId ?? store.run()!.parentRunId;
}

/** Whether the run spends from `parentRunId`'s cap (that parent counts its spend). */
export function spendsFromCapOf(store: RunStore, parentRunId: string): boolean {
  return store.spend.parentAllotment() !== null && allotter(store) === parentRunId;
}

/** Moves of a run's allotment under way, one at a time per run (per coordinator instance). */
const moves = new WeakMap<RunStore, Promise<void>>();

/**
 * Asks the parent allotting to a run that spends from its cap for `wantedMicros` more (at least `needMicros`);
 * keeps the new allotment. Answers whether it grew, and whether the parent says to wait for more. A parent that
 * allots no more (it is ending) while another waits on the run: the run moves to that one's cap, and asks again.
 */
export async function askParent(links: SpendLinks, wantedMicros: number, needMicros: number): Promise<{ grew: boolean; wait: boolean }> {
  const { env, store, journal } = links;
  const run = store.run()!;
  const moving = moves.get(store);
  if (moving) {
    await moving;
    return { grew: true, wait: false };
  }
  const held = store.spend.parentAllotment();
  const parent = allotter(store);
  if (held === null || parent === null) return { grew: false, wait: false };
  const answer = await new RunClient({ env, org: run.org }).allotChildSpend(parent, run.runId, wantedMicros, needMicros);
  // Moved meanwhile: that parent's answer is not the run's allotment any more.
  if (allotter(store) !== parent || moves.has(store)) return { grew: true, wait: false };
  const next = answer.ended ? journal.unnotifiedWatchers().find((watcher) => watcher !== parent) : undefined;
  if (next !== undefined) {
    await moveAllotment(links, parent, next);
    return { grew: true, wait: false };
  }
  if (answer.uncapped) {
    store.spend.moveAllotment(parent, store.spend.allotmentSource()?.baseMicros ?? 0, false);
    return { grew: true, wait: false };
  }
  store.spend.setParentAllotment(answer.micros);
  return { grew: (store.spend.parentAllotment() ?? 0) > held, wait: answer.wait };
}

/**
 * `from`, the parent allotting to this run, gave it up (it cancelled it, or allots no more) while `to` still waits
 * on it: from now on the run spends from `to`'s cap. At once it spends no more than it has already (new requests
 * wait for `to`'s allotment); `to` is asked for what its requests in flight and its running children hold, which
 * bill or end on its cap; `from` is told what the run spent so far (billed, and its ended children's spend), and
 * counts that as final, as a child's end. What `to` does not cover of those in flight stays counted by `from`
 * (within what it allotted): no parent's cap is passed, and each counts exactly what was spent on it unless `to`
 * had not the room. A no-op unless `from` allots to the run now.
 */
export async function moveAllotment(links: SpendLinks, from: string, to: string): Promise<void> {
  const { store } = links;
  while (moves.has(store)) await moves.get(store);
  const run = store.run()!;
  if (store.spend.parentAllotment() === null || allotter(store) !== from || isTerminal(run.status)) return;
  const move = carryOut(links, from, to).finally(() => moves.delete(store));
  moves.set(store, move);
  await move;
}

async function carryOut(links: SpendLinks, from: string, to: string): Promise<void> {
  const { env, store, journal } = links;
  const { spend } = store;
  const run = store.run()!;
  const earlier = spend.allotmentSource()?.baseMicros ?? 0;
  const settled = spend.settledMicros();
  const inFlight = Math.max(0, spend.committedMicros() - settled);
  // `from` is told nothing more of this run but what it spent of its cap, which it counts as final: with the calls
  // in flight until `to` answers for them (told so by the alarm should this object die before it does).
  journal.markMoved(from, settled + inFlight - earlier);
  spend.moveAllotment(to, settled, true);
  const runs = new RunClient({ env, org: run.org });
  let answer: ChildAllotment = { micros: 0, wait: false };
  try {
    answer = await runs.allotChildSpend(to, run.runId, inFlight, inFlight);
  } catch (error) {
    console.warn(`run ${run.runId}: could not ask parent run ${to} for spend as it moved to its cap`, error);
  }
  const granted = answer.ended || answer.uncapped ? 0 : answer.micros;
  const base = answer.uncapped ? settled : settled + Math.max(0, inFlight - granted);
  spend.moveAllotment(to, base, !answer.uncapped);
  if (!answer.uncapped) spend.setParentAllotment(granted);
  journal.markMoved(from, base - earlier);
  // Until told, `from` counts what it allotted (more than the run spent of it): the alarm tells it again.
  if ((await tellEach(links, faultProbeFor(env, { play: run.play }))) > 0) await links.wake();
}

/**
 * Tells each parent this run's allotment moved from, not told yet, what the run spent of its cap (stored as it
 * moved). Returns how many could not be told: the caller tries those again (the run's alarm, a bounded number
 * of times, as it does a run's end: run-links.ts tellParents).
 */
export async function tellMoves(links: Pick<SpendLinks, "env" | "store" | "journal">, faults: FaultProbe): Promise<number> {
  // A move under way tells its figure as it ends: told now, it could be one the move lowers still.
  return moves.has(links.store) ? 0 : tellEach(links, faults);
}

async function tellEach(links: Pick<SpendLinks, "env" | "store" | "journal">, faults: FaultProbe): Promise<number> {
  const { env, store, journal } = links;
  const run = store.run();
  if (!run) return 0;
  let untold = 0;
  await Promise.all(
    journal.movesToTell().map(async ({ runId: parent, micros }) => {
      try {
        await faults.check("child.moved");
        await new RunClient({ env, org: run.org }).childSpendMoved(parent, run.runId, micros);
        journal.markMoveTold(parent, micros);
      } catch (error) {
        untold++;
        console.warn(`run ${run.runId}: could not tell parent run ${parent} what it spent of its cap; tried again shortly`, error);
      }
    }),
  );
  return untold;
}
