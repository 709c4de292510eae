/**
 * A run's spend as its org sees it: the daily cap an invocation runs under,
 * the run's billed credits added to the org's day, and a completed run's
 * figures added to its play's history (what estimates learn from). The org's
 * figures live in its OrgDirectory; the run's own in its coordinator's store.
 */
import { isTerminal } from "../../core/statuses";
import type { RunStore } from "../../stores/run-store";
import { toCredits, toMicros } from "../../stores/spend-store";
import { type BillableRequest, type SpendCap, SpendCapReached } from "./spend";
import type { SpendGrant } from "../../contracts/executors";

import { OrgClient } from "../../clients/orgs";

type DirectoryEnv = Pick<Env, "ORG_DIRECTORY">;

/** A hold for a request of the coordinator's own asks for this many like it (an executor's grant is already as large). */
const HOLD_MULTIPLE = 25;

/**
 * The caps one invocation of a run spends under: the run's `maxSpend`, and
 * the org's daily limit, which the org's runs share. A run does not take
 * what the day has left for itself (two runs at once would each spend it):
 * it spends only what it holds of the day at its org (OrgSpendStore.holdDaily),
 * asked for as it needs it, a little more each time; what the day has
 * billed and every run's hold stay under the limit. The invocation's hold
 * ends once its spend is reported ({@link release}; the next invocation's
 * {@link spendCapOf} ends it too).
 */
export class InvocationSpendCap {
  readonly maxSpend: number | null;
  /** The org's daily limit in credits, or null (none, or the org could not be asked). */
  readonly dailyLimit: number | null;
  #store: RunStore;
  #hold: (wantedMicros: number) => Promise<number>;
  /** Committed when the invocation started: the daily cap is this plus what it holds. */
  #baseMicros: number;
  #heldMicros = 0;
  #asking: Promise<number> | null = null;

  constructor(options: {
    store: RunStore;
    maxSpend: number | null;
    dailyLimit: number | null;
    hold?(wantedMicros: number): Promise<number>;
  }) {
    this.#store = options.store;
    this.maxSpend = options.maxSpend;
    this.dailyLimit = options.dailyLimit;
    this.#hold = options.hold ?? (async () => 0);
    this.#baseMicros = options.store.spend.committedMicros();
  }

  get capped(): boolean {
    return this.maxSpend !== null || this.dailyLimit !== null;
  }

  /** What the run may have reserved and billed now, in micro-credits (null: no cap), and which cap that is. */
  #cap(): { micros: number; reason: "maxSpend" | "daily" } | null {
    const own = this.maxSpend === null ? null : toMicros(this.maxSpend);
    const daily = this.dailyLimit === null ? null : this.#baseMicros + this.#heldMicros;
    if (own === null && daily === null) return null;
    if (daily === null || (own !== null && own <= daily)) return { micros: own!, reason: "maxSpend" };
    return { micros: daily, reason: "daily" };
  }

  /** The cap as an error or a grant states it. */
  #stated(reason: "maxSpend" | "daily"): SpendCap {
    const micros = this.#cap()?.micros ?? 0;
    return reason === "daily"
      ? { credits: toCredits(micros), reason: "daily", limit: this.dailyLimit! }
      : { credits: this.maxSpend!, reason: "maxSpend" };
  }

  /** Reserves the request under the caps, first holding more of the org's day when that is what stands in the way. */
  async reserve(request: BillableRequest): Promise<void> {
    for (;;) {
      const cap = this.#cap();
      if (this.#store.spend.reserve(request, cap?.micros ?? null)) return;
      // Held for many requests like it at once: the org is asked rarely.
      const need = toMicros(request.credits) * HOLD_MULTIPLE;
      if (cap!.reason === "maxSpend" || !(await this.#more(need))) throw this.#reached(cap!.reason);
    }
  }

  /** Up to `wantedMicros` for an executor's attempt under the caps (holding more of the org's day first if it must). */
  async grant(attemptId: string, wantedMicros: number): Promise<SpendGrant> {
    let granted = this.#store.spend.grant(attemptId, wantedMicros, this.#cap()?.micros ?? null);
    while (granted < wantedMicros && this.#cap()?.reason === "daily" && (await this.#more(wantedMicros - granted)))
      granted += this.#store.spend.grant(attemptId, wantedMicros - granted, this.#cap()?.micros ?? null);
    const cap = this.#cap();
    return {
      grantedMicros: granted,
      spentCredits: toCredits(this.#store.spend.billedMicros()),
      cap: cap === null ? null : this.#stated(cap.reason),
    };
  }

  /** The invocation's spend is reported: its hold of the org's day ends. */
  async release(env: DirectoryEnv, runId: string, org: string): Promise<void> {
    if (this.dailyLimit === null || this.#heldMicros === 0) return;
    await new OrgClient({ env, org }).resetDailySpend(runId, Date.now());
    this.#heldMicros = 0;
    this.#baseMicros = this.#store.spend.committedMicros();
  }

  /**
   * Holds up to `needMicros` more of the org's day, or as much as it holds already if that is more (the asks grow
   * with what the invocation spends); false when the day has nothing left. One ask at a time.
   */
  async #more(needMicros: number): Promise<boolean> {
    const asked = this.#asking;
    if (asked) return (await asked) > 0;
    this.#asking = this.#hold(Math.max(needMicros, this.#heldMicros))
      .catch(() => 0)
      .then((granted) => {
        this.#heldMicros += granted;
        return granted;
      })
      .finally(() => {
        this.#asking = null;
      });
    return (await this.#asking) > 0;
  }

  #reached(reason: "maxSpend" | "daily"): SpendCapReached {
    const spent = toCredits(this.#store.spend.billedMicros());
    return reason === "maxSpend" ? new SpendCapReached(spent, this.maxSpend!) : new SpendCapReached(spent, this.dailyLimit!, "daily");
  }
}

/**
 * This invocation's caps: the run's `maxSpend`, and the org's daily limit
 * (held a little at a time, see {@link InvocationSpendCap}). The run's spend
 * is reported first, which ends the hold of its last invocation.
 */
export async function spendCapOf(env: DirectoryEnv, store: RunStore): Promise<InvocationSpendCap> {
  const run = store.run();
  const maxSpend = run && !isTerminal(run.status) ? run.maxSpend : null;
  if (!run || isTerminal(run.status)) return new InvocationSpendCap({ store, maxSpend: null, dailyLimit: null });
  const org = new OrgClient({ env, org: run.org });
  let dailyLimit: number | null;
  try {
    // Reported, the spend its last invocation held room for is in the day's total: that hold ends.
    dailyLimit = (await reportSpend(env, store))
      ? (await org.resetDailySpend(run.runId, Date.now())).dailyCredits
      : (await org.spendBudget(Date.now())).dailyCredits;
  } catch (error) {
    // Without the org's figures the run still holds its own cap; the daily one is checked again next invocation.
    console.warn(`run ${run.runId}: could not read the org's spend budget`, error);
    return new InvocationSpendCap({ store, maxSpend, dailyLimit: null });
  }
  return new InvocationSpendCap({
    store,
    maxSpend,
    dailyLimit,
    hold: (wantedMicros) => org.holdDailySpend(run.runId, Date.now(), wantedMicros),
  });
}

/** A run that just completed adds what it computed and billed to its play's history (what estimates learn from). */
export async function recordPlayHistory(env: DirectoryEnv, store: RunStore): Promise<void> {
  const run = store.run()!;
  if (run.status !== "completed") return;
  try {
    await new OrgClient({ env, org: run.org }).recordPlayStats({
      runId: run.runId,
      play: run.play,
      rowsComputed: store.computedRows(),
      tools: store.spend.billedByTool(),
    });
  } catch (error) {
    // History only makes estimates better: a run that could not add to it still completed.
    console.warn(`run ${run.runId}: could not add to its play's history`, error);
  }
}

/**
 * Adds the run's newly billed spend to the org's daily totals; false if that
 * could not be done now. The org answers the place it has counted the run's
 * bills up to: past an earlier report whose answer was lost, the bills after
 * it go again.
 */
export async function reportSpend(env: DirectoryEnv, store: RunStore): Promise<boolean> {
  const run = store.run()!;
  const org = new OrgClient({ env, org: run.org });
  for (let round = 0; round < 3; round++) {
    const report = store.spend.unreported();
    if (!report) return true;
    let counted: number;
    try {
      counted = await org.recordSpend({ runId: run.runId, ...report });
    } catch (error) {
      console.warn(`run ${run.runId}: could not report its spend to the org`, error);
      return false;
    }
    store.spend.markReported(counted);
  }
  return store.spend.unreported() === null;
}
