/**
 * A run's spend as its org sees it: the daily cap an invocation runs under,
 * the run's billed credits added to the org's day, and a completed run's
 * figures added to its play's history (what estimates learn from). The org's
 * figures live in its OrgDirectory; the run's own in its coordinator's store.
 */
import { isTerminal } from "../../core/statuses";
import type { RunStore } from "../../stores/run-store";
import { toCredits, toMicros } from "../../stores/spend-store";
import { utcDay } from "../../stores/org-spend-store";
import { type BillableRequest, type CapReason, MAX_GRANT_WAIT_MS, type SpendCap, SpendCapReached } from "./spend";
import { askParent, type SpendLinks } from "./child-spend";
import { sleep } from "../../core/time";
import type { SpendGrant } from "../../contracts/executors";

import { OrgClient } from "../../clients/orgs";

type DirectoryEnv = Pick<Env, "ORG_DIRECTORY" | "RUN_COORDINATOR">;

/** A hold for a request of the coordinator's own asks for this many like it (an executor's grant is already as large). */
const HOLD_MULTIPLE = 25;
/** Tries of a hold before the org is taken to have nothing for the run (a refusal fails the run: an RPC blip must not). */
const HOLD_TRIES = 3;
/** How long an attempt refused while others hold reservations waits before it asks again (SpendGrant.waitMs). */
const GRANT_WAIT_MS = 250;
/** An attempt told to wait counts as waiting while it asks again within this long (it may have gone on without). */
const WAITING_FOR_MS = 4 * GRANT_WAIT_MS;
/**
 * Holds that have not moved (none billed, settled or freed) for this long belong to attempts that will not bill
 * them soon (one the coordinator gave up on, a request of an invocation that died): not waited for.
 */
const HELD_STALL_MS = 10_000;

/**
 * The caps one invocation of a run spends under: the run's `maxSpend`, and
 * the org's daily limit, which the org's runs share. A run does not take
 * what the day has left for itself (two runs at once would each spend it):
 * it spends only what it holds of the day at its org (OrgSpendStore.holdDaily),
 * asked for as it needs it, a little more each time (never past what its
 * `maxSpend` leaves, nor more than half the day's rest); what the day has
 * billed and every run's hold stay under the limit. Once the invocation's
 * spend is reported ({@link release}; the next invocation's
 * {@link spendCapOf} does it too), its hold shrinks to what the run still
 * has reserved. A new UTC day starts the holding over.
 */
export class InvocationSpendCap {
  readonly maxSpend: number | null;
  /** The org's daily limit in credits, or null (none, or the org could not be asked). */
  readonly dailyLimit: number | null;
  #store: RunStore;
  #hold: (wantedMicros: number, needMicros: number) => Promise<number>;
  #askParent: (wantedMicros: number, needMicros: number) => Promise<{ grew: boolean; wait: boolean }>;
  /** The parent refused the last ask while the run's siblings hold allotments that come back as they end. */
  #parentSaysWait = false;
  #now: () => number;
  /** Committed when the holding started (the invocation, or the day): the daily cap is this plus what it holds. */
  #baseMicros: number;
  #heldMicros = 0;
  #day: string;
  #asking: Promise<number> | null = null;
  #askingParent: Promise<boolean> | null = null;
  /**
   * Attempts told to wait for a grant, and when they last asked: what they hold comes back only once they are
   * granted. One that has not asked again lately went on without (a reservation of its own was freed).
   */
  #waiting = new Map<string, number>();
  /** What others held when it last changed, and when. */
  #held = { micros: 0, since: 0 };

  constructor(options: {
    store: RunStore;
    maxSpend: number | null;
    dailyLimit: number | null;
    hold?(wantedMicros: number, needMicros: number): Promise<number>;
    /** A run that spends from its parent's cap asks it for more (child-spend.ts); whether its allotment grew. */
    askParent?(wantedMicros: number, needMicros: number): Promise<{ grew: boolean; wait: boolean }>;
    now?(): number;
  }) {
    this.#store = options.store;
    this.maxSpend = options.maxSpend;
    this.dailyLimit = options.dailyLimit;
    this.#hold = options.hold ?? (async () => 0);
    this.#askParent = options.askParent ?? (async () => ({ grew: false, wait: false }));
    this.#now = options.now ?? Date.now;
    this.#baseMicros = this.#ownCommitted();
    this.#day = utcDay(this.#now());
  }

  get capped(): boolean {
    return this.maxSpend !== null || this.dailyLimit !== null || this.#store.spend.parentAllotment() !== null;
  }

  /** Reserved and billed by the run itself: what it holds of the org's day covers (its children hold their own). */
  #ownCommitted(): number {
    return this.#store.spend.committedMicros() - this.#store.spend.childrenMicros();
  }

  /**
   * What the run may have reserved and billed now (its children's allotments counted), in micro-credits (null: no
   * cap), and which cap that is.
   */
  #cap(): { micros: number; reason: CapReason } | null {
    // Past midnight (UTC) the org forgets yesterday's holds: what was held then is not today's.
    const today = utcDay(this.#now());
    if (today !== this.#day) {
      this.#day = today;
      this.#heldMicros = 0;
      this.#baseMicros = this.#ownCommitted();
    }
    const caps: { micros: number; reason: CapReason }[] = [];
    if (this.maxSpend !== null) caps.push({ micros: toMicros(this.maxSpend), reason: "maxSpend" });
    const allotted = this.#store.spend.parentAllotment();
    if (allotted !== null) caps.push({ micros: allotted, reason: "parent" });
    if (this.dailyLimit !== null)
      caps.push({ micros: this.#baseMicros + this.#heldMicros + this.#store.spend.childrenMicros(), reason: "daily" });
    return caps.reduce<{ micros: number; reason: CapReason } | null>((low, cap) => (low && low.micros <= cap.micros ? low : cap), null);
  }

  /** The cap as an error or a grant states it. */
  #stated(reason: CapReason): SpendCap {
    const micros = this.#cap()?.micros ?? 0;
    if (reason === "daily") return { credits: toCredits(micros), reason: "daily", limit: this.dailyLimit! };
    return reason === "parent" ? { credits: toCredits(micros), reason: "parent" } : { credits: this.maxSpend!, reason: "maxSpend" };
  }

  /**
   * Reserves the request under the caps, first holding more of the org's day when that is what stands in the way.
   * Refused while executors' attempts (or requests of its own in flight) hold what the cap has left, it waits for
   * them to bill it or give it back, as an attempt does (MAX_GRANT_WAIT_MS), until `signal` stops it.
   */
  async reserve(request: BillableRequest, signal?: AbortSignal): Promise<void> {
    let waitedMs = 0;
    for (;;) {
      const cap = this.#cap();
      if (this.#store.spend.reserve(request, cap?.micros ?? null)) return;
      const need = toMicros(request.credits);
      // Held for many requests like it at once: the org is asked rarely.
      if (cap!.reason === "daily" && (await this.#more(need, need * HOLD_MULTIPLE))) continue;
      if (cap!.reason === "parent" && (await this.#moreOfParent(need, need * HOLD_MULTIPLE))) continue;
      const others = this.#othersMoving() || (cap!.reason === "parent" && this.#parentSaysWait);
      if (waitedMs >= MAX_GRANT_WAIT_MS || !others) throw this.#reached(cap!.reason);
      await sleep(GRANT_WAIT_MS, signal);
      waitedMs += GRANT_WAIT_MS;
    }
  }

  /** Up to `wantedMicros` for an executor's attempt under the caps (holding more of the org's day first if it must). */
  async grant(attemptId: string, wantedMicros: number): Promise<SpendGrant> {
    let granted = this.#store.spend.grant(attemptId, wantedMicros, this.#cap()?.micros ?? null);
    // An executor asks for many requests' worth: it needs one.
    const need = Math.max(1, Math.ceil(wantedMicros / HOLD_MULTIPLE));
    for (;;) {
      const reason = this.#cap()?.reason;
      // The parent is asked only for an attempt granted nothing: refused a top-up, a child would count as waiting.
      if (granted >= wantedMicros || (reason === "parent" && granted > 0)) break;
      if (!(await this.#moreFor(reason, need, wantedMicros - granted))) break;
      granted += this.#store.spend.grant(attemptId, wantedMicros - granted, this.#cap()?.micros ?? null);
    }
    const cap = this.#cap();
    if (granted > 0) this.#waiting.delete(attemptId);
    return {
      grantedMicros: granted,
      spentCredits: toCredits(this.#store.spend.billedMicros()),
      cap: cap === null ? null : this.#stated(cap.reason),
      ...(granted === 0 && cap !== null && (this.#othersHold(attemptId) || (cap.reason === "parent" && this.#parentSaysWait))
        ? { waitMs: GRANT_WAIT_MS }
        : {}),
    };
  }

  /**
   * Whether attempts other than `attemptId` (or the coordinator's own requests) hold reservations that will be
   * billed or freed as they go on: the cap is not reached while they do, and a refused attempt waits for them. Not
   * those of attempts waiting themselves, whose holds come back only when they are granted (each waiting on the
   * others' would wait for ever).
   */
  #othersHold(attemptId: string): boolean {
    this.#waiting.set(attemptId, this.#now());
    return this.#othersMoving();
  }

  /** Whether attempts not waiting (or requests in flight) hold reservations, and have billed or freed some lately. */
  #othersMoving(): boolean {
    const held = this.#store.spend.heldMicros(this.#waiters());
    const now = this.#now();
    if (held !== this.#held.micros) this.#held = { micros: held, since: now };
    return held > 0 && now - this.#held.since < HELD_STALL_MS;
  }

  /** The attempts waiting for a grant now (they asked again lately). */
  #waiters(): string[] {
    const now = this.#now();
    for (const [waiter, askedAt] of this.#waiting) if (now - askedAt > WAITING_FOR_MS) this.#waiting.delete(waiter);
    return [...this.#waiting.keys()];
  }

  /** The run's spend is reported: its hold of the org's day shrinks to what it still has reserved. */
  async release(env: DirectoryEnv, runId: string, org: string): Promise<void> {
    // Bills that landed after the report (an executor's, while it was sent) are not in the day's total yet: still held.
    const spend = this.#store.spend;
    await new OrgClient({ env, org }).resetDailySpend(runId, spend.reservedMicros() + spend.unreportedMicros());
    this.#heldMicros = 0;
    this.#baseMicros = this.#ownCommitted();
  }

  /** More of the cap that stands in the way, where asking can give more: the org's day, or the parent's cap. */
  #moreFor(reason: CapReason | undefined, needMicros: number, wantedMicros: number): Promise<boolean> {
    if (reason === "daily") return this.#more(needMicros, wantedMicros);
    if (reason === "parent") return this.#moreOfParent(needMicros, wantedMicros);
    return Promise.resolve(false);
  }

  /** Asks the parent for at least `needMicros` more of its cap, `wantedMicros` if it can. One ask at a time. */
  async #moreOfParent(needMicros: number, wantedMicros: number): Promise<boolean> {
    this.#askingParent ??= this.#askParent(Math.max(needMicros, wantedMicros), needMicros)
      .then(({ grew, wait }) => {
        this.#parentSaysWait = wait;
        return grew;
      })
      .catch((error: unknown) => {
        console.warn("could not ask the parent run for more of its spend cap", error);
        return false;
      })
      .finally(() => {
        this.#askingParent = null;
      });
    return this.#askingParent;
  }

  /**
   * Holds at least `needMicros` more of the org's day, `wantedMicros` if it can (or as much as it holds already, so
   * the asks grow with what the invocation spends; never past what `maxSpend` leaves); false when the day has less.
   * One ask at a time.
   */
  async #more(needMicros: number, wantedMicros: number): Promise<boolean> {
    const asked = this.#asking;
    if (asked) return (await asked) > 0;
    const own = this.maxSpend === null ? Number.POSITIVE_INFINITY : toMicros(this.maxSpend) - this.#store.spend.committedMicros();
    const wanted = Math.max(needMicros, Math.min(Math.max(wantedMicros, this.#heldMicros), own));
    const day = this.#day;
    this.#asking = this.#askOrg(wanted, needMicros)
      .then((granted) => {
        // Granted for a day that has ended meanwhile: not today's.
        if (day === this.#day) this.#heldMicros += granted;
        return day === this.#day ? granted : 0;
      })
      .finally(() => {
        this.#asking = null;
      });
    return (await this.#asking) > 0;
  }

  async #askOrg(wantedMicros: number, needMicros: number): Promise<number> {
    for (let tries = 1; ; tries++) {
      try {
        return await this.#hold(wantedMicros, needMicros);
      } catch (error) {
        if (tries >= HOLD_TRIES) {
          console.warn("could not hold more of the org's daily limit", error);
          return 0;
        }
        await new Promise((resolve) => setTimeout(resolve, 100 * tries));
      }
    }
  }

  #reached(reason: CapReason): SpendCapReached {
    const spent = toCredits(this.#store.spend.billedMicros());
    if (reason === "parent") return new SpendCapReached(spent, toCredits(this.#cap()?.micros ?? 0), "parent");
    return reason === "maxSpend" ? new SpendCapReached(spent, this.maxSpend!) : new SpendCapReached(spent, this.dailyLimit!, "daily");
  }
}

/**
 * This invocation's caps: the run's `maxSpend`, and the org's daily limit
 * (held a little at a time, see {@link InvocationSpendCap}). The run's spend
 * is reported first, which shrinks the hold of its last invocation to what
 * the run still has reserved.
 */
export async function spendCapOf(env: DirectoryEnv, links: SpendLinks): Promise<InvocationSpendCap> {
  const { store } = links;
  const run = store.run();
  if (!run || isTerminal(run.status)) return new InvocationSpendCap({ store, maxSpend: null, dailyLimit: null });
  const { maxSpend } = run;
  const org = new OrgClient({ env, org: run.org });
  const fromParent = (wantedMicros: number, needMicros: number) => askParent(links, wantedMicros, needMicros);
  let dailyLimit: number | null;
  try {
    const reserved = store.spend.reservedMicros();
    dailyLimit = (await reportSpend(env, store))
      ? (await org.resetDailySpend(run.runId, reserved)).dailyCredits
      : (await org.spendBudget(Date.now())).dailyCredits;
  } catch (error) {
    // Without the org's figures the run still holds its own cap; the daily one is checked again next invocation.
    console.warn(`run ${run.runId}: could not read the org's spend budget`, error);
    return new InvocationSpendCap({ store, maxSpend, dailyLimit: null, askParent: fromParent });
  }
  return new InvocationSpendCap({
    store,
    maxSpend,
    dailyLimit,
    askParent: fromParent,
    hold: (wantedMicros, needMicros) => org.holdDailySpend(run.runId, wantedMicros, needMicros),
  });
}

/**
 * A run that just completed adds what it computed and billed to its play's
 * history (what estimates learn from: billed requests per computed row). A
 * `force` run without `forceToolRefresh` adds nothing: it computes its rows
 * again but answers their calls from receipts, billing only the few that
 * have none, and which of its rows those were is not known, so its rows and
 * bills are left out together rather than counted as rows that call nothing.
 */
export async function recordPlayHistory(env: DirectoryEnv, store: RunStore): Promise<void> {
  const run = store.run()!;
  if (run.status !== "completed" || (run.force && !run.forceToolRefresh)) return;
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
