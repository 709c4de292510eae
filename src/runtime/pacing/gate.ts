/**
 * The arithmetic of one (org, provider) pacing gate, free of Cloudflare: the
 * PacingGate object holds one `GateLedger` in memory and feeds it the clock.
 *
 * - **Rate.** Slots are handed out on a virtual schedule (GCRA): each slot
 *   starts one interval after the previous one, whoever asked for it, so the
 *   rate holds across every caller. A caller leases several slots at once (up
 *   to {@link SLOT_HORIZON_MS} ahead) and waits for each slot's start itself,
 *   so the gate costs one call per lease, not one per provider request.
 *   A declared rate is leased further ahead ({@link DECLARED_HORIZON_MS}),
 *   so that each of many callers can hold its units' worth of slots and not
 *   come back until they are used.
 *   Which rate, and how 429s move it, is `ProviderRate`'s (`rate.ts`):
 *   declared, else announced by the provider, else learned from its 429s.
 * - **First contact.** Until the provider has been heard from, a provider
 *   with no declared rate gets one request (the probe) and the others wait
 *   for its answer (at most {@link PROBE_TIMEOUT_MS}): the answer's headers
 *   may announce the quota, which a first burst would otherwise overrun.
 * - **Remaining.** An answer saying nothing is left pauses every caller until
 *   the provider's reset (unless the gate's own requests fill the quota's
 *   window: the schedule already keeps to it); with a reset far enough away
 *   to be precise ({@link BUDGET_MIN_RESET_MS}), what is left becomes a
 *   budget no schedule outruns. Both slow callers down before a 429.
 * - **Backpressure.** A reported 429 pauses every caller until its
 *   Retry-After, and may lower the rate.
 * - **Concurrency.** Callers hold concurrency units for a lease TTL, renewed
 *   by every acquire; the units held never sum past the policy's limit. When
 *   a caller is starved, the others are trimmed to a fair share as they renew
 *   (`ConcurrencyUnits`, `units.ts`). Slots of the rate alone (`rateOnly`: a
 *   recovery lookup, which its caller needs before its calls can go on) are
 *   granted on the schedule whatever units the caller holds, and hold none.
 *
 * State is memory only but for the pause ({@link GateLedger.pausedUntil}),
 * which the PacingGate object stores: a restarted gate starts a fresh
 * schedule and probes again, which at worst lets one horizon of slots overlap
 * (the provider's 429s then slow it), but it keeps every caller out of a
 * Retry-After (minutes, maybe) it was told of before.
 */
import { HISTORY_MS, StartHistory } from "./history";
import type { PacingPolicy } from "./policy";
import { ProviderRate } from "./rate";
import { ConcurrencyUnits } from "./units";
import type { Quota, Remaining } from "./signals";

/** Slots are leased at most this far ahead of now... */
export const SLOT_HORIZON_MS = 1000;
/**
 * ...or this far when the policy declares the rate: it is known rather than
 * guessed, so slots leased far ahead are rarely dropped (only a 429 lowers
 * it, and callers drop the slots leased before its pause). Enough for every
 * unit of a provider allowing 256 at once at 100 requests/s to hold a slot.
 */
export const DECLARED_HORIZON_MS = 3000;
/**
 * A caller whose lease reaches the horizon asks again once this much more of
 * the schedule is grantable: one call per this many ms of slots, not one per
 * slot, while it still holds the rest of the horizon.
 */
export const LEASE_REFILL_MS = 250;
/** Most slots one lease carries. */
export const MAX_SLOTS_PER_LEASE = 500;
/** A 429 that names no wait pauses every caller this long when nothing paces the provider... */
export const BARE_429_WAIT_MS = 1000;
/** ...and this many intervals of the pace when something does. */
export const BARE_429_INTERVALS = 4;
/** A caller refused concurrency asks again after this long. */
export const CONCURRENCY_RETRY_MS = 25;
/**
 * A caller whose next slot is far off at the pace in force asks again at
 * least this often: a rate raised meanwhile (an org's `PUT /v1/pacing`, a
 * higher limit learned) reaches it within this long, not at the slot the old
 * pace set (at one request per 100 s, up to 100 s later). A wait the
 * provider set (a pause, a budget spent until its reset) is waited out whole:
 * no policy lifts it.
 */
export const RATE_RECHECK_MS = 5000;
/** While nothing paces the provider, a caller may start requests without asking for this long. */
export const UNPACED_LEASE_MS = 1000;
/** Unpaced starts told together are recorded in at most this many steps over the span they started in. */
export const UNPACED_SPREAD_STEPS = 10;
/** The probe's answer is waited for at most this long; then callers go on as if it said nothing. */
export const PROBE_TIMEOUT_MS = 2000;
/** Callers waiting for the probe's answer ask again after this long. */
export const PROBE_RETRY_MS = 25;
/**
 * Resets come in whole seconds, so a nearer one may mean "now" as well as
 * "in a second": only a reset at least this far away turns what is left into
 * a budget (a remaining of 0 pauses until any reset).
 */
export const BUDGET_MIN_RESET_MS = 2000;
/**
 * A provider saying nothing is left, when at least this share of its quota's
 * window holds the gate's own requests, is at the edge the schedule already
 * keeps to: no pause.
 */
export const OWN_WINDOW_SHARE = 0.9;

/**
 * What a caller tells the gate about the answers it got since it last told
 * it: sent with every `acquire`, and at once (`report`) when it cannot wait.
 */
export interface GateSignal {
  /** Answers that were rate limits: 429s, or what a tool classified as one. */
  limited: number;
  /** Requests started without a slot (while nothing paced the provider). */
  unpacedStarts: number;
  /** How long before this call the first and the last of them started (absent: just now); they are spread between. */
  unpacedSinceMs?: number;
  unpacedLastMs?: number;
  /** The longest wait a rate-limited answer asked for. */
  retryAfterMs: number | null;
  /** The latest quota the provider announced. */
  quota: Quota | null;
  /** The latest remaining count, and how long before this report its request was sent. */
  remaining: (Remaining & { ageMs: number }) | null;
  /** This reports the answer to the gate's probe (see {@link Grant.probe}). */
  probe: boolean;
}

/** A signal that says nothing. */
export const EMPTY_SIGNAL: GateSignal = { limited: 0, unpacedStarts: 0, retryAfterMs: null, quota: null, remaining: null, probe: false };

/** One caller asking for slots and concurrency. */
export interface AcquireRequest {
  /** Stable for one caller (one invocation of one run). */
  caller: string;
  /** New slots wanted now. */
  slots: number;
  /** Of `slots`, how many are of the rate alone: granted first, on the schedule, whatever the units (absent: none). */
  rateOnly?: number;
  /** The caller's provider requests in flight. */
  inFlight: number;
  /** Concurrency units wanted in all (in flight, waiting, and some headroom); at least `inFlight + slots` is assumed. */
  units?: number;
  /** What the caller heard since its last call. */
  signal?: GateSignal;
  now: number;
}

/** What the gate leased to a caller. */
export interface Grant {
  /** When each granted slot may start, as offsets from {@link Grant.grantedAt} (ascending). */
  startInMs: number[];
  /** The gate's clock when it granted them: callers place the slots on it, not on when the answer reached them. */
  grantedAt: number;
  /** Concurrency units the caller holds now; null: no concurrency limit. */
  units: number | null;
  /**
   * When fewer slots were granted than asked (the schedule is leased to its
   * horizon, units are short, a probe or a measurement is under way): ask
   * again after this long. A caller whose own requests hold every unit it
   * asked for need not: a slot is of no use to it before one of them ends.
   */
  retryInMs: number | null;
  /**
   * Nothing paces the provider now (no declared, announced or learned rate,
   * no pause): for this long the caller may start requests within its units
   * without asking for slots. 0 when paced.
   */
  unpacedForMs: number;
  /** The first granted slot is the probe: report its answer at once, whatever it says. */
  probe: boolean;
  policy: PacingPolicy;
}

/** A snapshot for diagnostics and tests. */
export interface GateSnapshot {
  effectiveRequestsPerSecond: number | null;
  rateFactor: number;
  /** The rate the provider's announced quota allows (null: none announced). */
  announcedRequestsPerSecond: number | null;
  learnedRequestsPerSecond: number | null;
  /** Whether the provider has answered since the gate started (before that, requests wait for the probe). */
  heard: boolean;
  pausedUntil: number;
  /**
   * How far past now a slot asked for now would start (0: at once): the slots
   * its callers have leased ahead under the rate, or the pause still to wait
   * out. While it is more than a moment, the provider's rate, not its callers'
   * connections, is what holds its requests back.
   */
  bookedForMs: number;
  /** Slots left before the provider's reset, when its remaining count set a budget. */
  budget: { left: number; until: number } | null;
  holders: number;
  unitsHeld: number;
  /** Rate-limited answers reported. */
  backpressureReports: number;
  /** Slots granted so far, and the most whose starts fell within any one second (what the rate bounds). */
  slotsGranted: number;
  maxSlotsPerSecond: number;
}

/** The pacing state of one (org, provider); see the module comment. */
export class GateLedger {
  #rate = new ProviderRate();
  #history = new StartHistory();
  #nextSlotAt = 0;
  /** What it learned was forgotten (`forgetLearned`) since the last acquire: the schedule goes on at the pace now. */
  #forgotten = false;
  #pausedUntil = 0;
  #budget: { left: number; until: number } | null = null;
  #heard = false;
  /** The last acquire was paced (a rate was in force). */
  #paced = false;
  /** The declared rate the schedule was built under (undefined: none seen yet). */
  #declared: number | null | undefined = undefined;
  #probe: { caller: string; until: number } | null = null;
  #reports = 0;
  #units = new ConcurrencyUnits();

  /** Until when every caller is paused (a Retry-After, nothing left until a reset); in the past when not paused. */
  get pausedUntil(): number {
    return this.#pausedUntil;
  }

  /** A pause stored before a restart: every caller waits until `until`, as before it. */
  restorePause(until: number): void {
    this.#pause(until);
  }

  /** The limit learned from the provider's 429s, requests per second; null when none (see ProviderRate). */
  get learned(): number | null {
    return this.#rate.learned;
  }

  /**
   * A limit learned before a restart: the provider was heard from (no probe holds the first callers), and its
   * requests are paced at the limit at once, not sent unpaced into its 429s to learn it again.
   */
  restoreLearned(requestsPerSecond: number, now: number): void {
    this.#rate.restoreLearned(requestsPerSecond, now);
    this.#heard = true;
  }

  /** Takes in the caller's signal, then grants up to `request.slots` slots and the caller's concurrency units. */
  acquire(policy: PacingPolicy, request: AcquireRequest): Grant {
    const { caller, now, inFlight } = request;
    if (this.#budget && this.#budget.until <= now) this.#budget = null;
    if (request.signal) this.#absorb(policy, request.signal, now);
    this.#rate.settle({ now, pausedUntil: this.#pausedUntil, history: this.#history });
    this.#rate.recover(policy, { now, pausedUntil: this.#pausedUntil });
    this.#units.expire(now);
    const rateOnly = Math.max(0, Math.min(request.rateOnly ?? 0, request.slots, MAX_SLOTS_PER_LEASE));
    let slots = Math.max(0, Math.min(request.slots, MAX_SLOTS_PER_LEASE) - rateOnly);
    let units: number | null = null;
    if (policy.concurrency !== null) {
      units = this.#units.grant(policy.concurrency, caller, inFlight, Math.max(request.units ?? 0, inFlight + slots), now);
      slots = Math.min(slots, Math.max(0, units - inFlight));
    }
    slots += rateOnly;
    const rps = this.#rate.effective(policy);
    const firstContact = this.#firstContact(policy, caller, now);
    if (firstContact === "wait")
      return { startInMs: [], grantedAt: now, units, retryInMs: PROBE_RETRY_MS, unpacedForMs: 0, probe: false, policy };
    if (firstContact === "probe") slots = Math.min(slots, 1);
    // A rate just came into force (the probe's answer announced a quota, a 429 taught one): the requests already started count.
    const last = this.#history.last;
    if (rps !== null && !this.#paced && last !== undefined) this.#nextSlotAt = Math.max(this.#nextSlotAt, last + 1000 / rps);
    // A declared rate changed (an org's override corrected): the schedule goes on at the new pace from now, not after
    // a slot the old pace put far away (one request per 100 s: the next slot 100 s out).
    // So does a reset (DELETE): what was declared before it is not known, and its schedule may be that far away.
    const changed = this.#declared === undefined ? this.#forgotten : policy.requestsPerSecond !== this.#declared;
    // Never before the slots already handed out, at the new pace: those go out as leased, and new ones over them would
    // pass the rate. (Without a rate now, no later than now: a rate announced later paces from the last start.)
    if (changed) {
      const after = rps === null ? now : Math.max(now, (last ?? -Infinity) + 1000 / rps);
      this.#nextSlotAt = Math.min(this.#nextSlotAt, Math.max(after, this.#pausedUntil));
    }
    this.#declared = policy.requestsPerSecond;
    this.#forgotten = false;
    this.#paced = rps !== null;
    const startInMs: number[] = [];
    const earliest = Math.max(now, this.#pausedUntil);
    // While a learned limit is being measured the rate is a guess: nothing is leased past the measurement.
    const measuring = this.#rate.measuringUntil;
    const horizonMs = policy.requestsPerSecond === null ? SLOT_HORIZON_MS : DECLARED_HORIZON_MS;
    const leaseEnd = measuring === null ? now + horizonMs : Math.min(now + horizonMs, Math.max(earliest, measuring));
    for (let i = 0; i < slots; i++) {
      const at = this.#withinBudget(rps === null ? earliest : Math.max(earliest, this.#nextSlotAt));
      if (at > leaseEnd) break;
      if (this.#budget && at < this.#budget.until) this.#budget.left--;
      if (rps !== null) this.#nextSlotAt = at + 1000 / rps;
      startInMs.push(at - now);
      this.#history.record(at);
    }
    this.#trim(now);
    let retryInMs: number | null = null;
    if (startInMs.length < slots || (startInMs.length === 0 && request.slots > 0)) {
      // Short of the slots of the rate alone, the schedule is what holds it back.
      const blockedByUnits = startInMs.length >= rateOnly && units !== null && units <= inFlight;
      const pacedAt = Math.max(earliest, rps === null ? earliest : this.#nextSlotAt);
      const slotAt = this.#withinBudget(pacedAt);
      const untilGrantable = measuring === null ? slotAt - now - horizonMs + LEASE_REFILL_MS : measuring - now;
      // What the provider holds back (a pause, a budget spent until its reset) is waited out; what the pace holds back
      // is asked about again (RATE_RECHECK_MS).
      const recheck = slotAt > pacedAt ? untilGrantable : Math.min(untilGrantable, RATE_RECHECK_MS);
      retryInMs = blockedByUnits ? CONCURRENCY_RETRY_MS : Math.max(1, this.#pausedUntil - now, recheck);
    }
    const unpaced = rps === null && this.#pausedUntil <= now && this.#budget === null && this.#heard;
    const probe = firstContact === "probe" && startInMs.length > 0;
    if (firstContact === "probe" && !probe) this.#probe = null;
    return { startInMs, grantedAt: now, units, retryInMs, unpacedForMs: unpaced ? UNPACED_LEASE_MS : 0, probe, policy };
  }

  /**
   * A caller heard something it could not keep until its next acquire: a
   * 429, a remaining of 0, a new quota, the probe's answer. Answers how long
   * every caller is paused from now (0: not paused), so the caller can drop
   * the slots it leased before.
   */
  report(policy: PacingPolicy, { signal, now }: { signal: GateSignal; now: number }): { pausedForMs: number } {
    this.#absorb(policy, signal, now);
    this.#rate.settle({ now, pausedUntil: this.#pausedUntil, history: this.#history });
    this.#trim(now);
    return { pausedForMs: Math.max(0, this.#pausedUntil - now) };
  }
  /**
   * Forgets the history past its few seconds, but for the second before a 429 whose learned limit is still to be
   * measured: a Retry-After of seconds outlasts the history, and a renewal during it (every caller waits) would
   * leave the measurement no starts (a learned limit of 1 a second).
   */
  #trim(now: number): void {
    const from = this.#rate.measuringFrom;
    this.#history.trim(from === null ? now : Math.min(now, from - 1000 + HISTORY_MS));
  }

  /** The caller is done: its concurrency units return at once. */
  release(caller: string): void {
    this.#units.release(caller);
  }

  /**
   * Forgets what was learned of the provider (its rate, its quota, that it
   * was heard from: the next request probes it again), not what is under
   * way: the units callers hold for requests in flight, the slots already
   * handed out and a pause the provider asked for stay, or a reset would
   * hand them out a second time.
   */
  forgetLearned(): void {
    this.#rate = new ProviderRate();
    this.#history.restartCounts();
    this.#budget = null;
    this.#heard = false;
    this.#probe = null;
    this.#reports = 0;
    this.#paced = false;
    this.#declared = undefined;
    this.#forgotten = true;
  }

  snapshot(policy: PacingPolicy, now: number): GateSnapshot {
    this.#units.expire(now);
    return {
      effectiveRequestsPerSecond: this.#rate.effective(policy),
      rateFactor: this.#rate.factor,
      announcedRequestsPerSecond: this.#rate.announced(),
      learnedRequestsPerSecond: this.#rate.learned,
      heard: this.#heard,
      pausedUntil: this.#pausedUntil,
      bookedForMs: this.#nextStartAt(now) - now,
      budget: this.#budget && this.#budget.until > now ? { ...this.#budget } : null,
      holders: this.#units.holders,
      unitsHeld: this.#units.held,
      backpressureReports: this.#reports,
      slotsGranted: this.#history.slotsGranted,
      maxSlotsPerSecond: this.#history.maxSlotsPerSecond,
    };
  }

  #absorb(policy: PacingPolicy, signal: GateSignal, now: number): void {
    if (signal.probe || signal.limited > 0 || signal.quota !== null || signal.remaining !== null) {
      this.#heard = true;
      this.#probe = null;
    }
    if (signal.unpacedStarts > 0) {
      const count = Math.min(signal.unpacedStarts, MAX_SLOTS_PER_LEASE);
      const first = now - Math.min(signal.unpacedSinceMs ?? 0, HISTORY_MS);
      this.#recordUnpaced(count, first, Math.max(first, now - (signal.unpacedLastMs ?? 0)));
    }
    this.#rate.hear({ quota: signal.quota, resetMs: signal.remaining?.resetMs ?? null, now });
    if (signal.remaining) this.#remaining(signal.remaining, now);
    if (signal.limited > 0) {
      this.#reports++;
      this.#history.recordLimited(now, signal.limited);
      this.#pause(now + Math.max(0, signal.retryAfterMs ?? this.#bareWaitMs(policy)));
      this.#rate.rateLimited(policy, { now, count: signal.limited, pausedUntil: this.#pausedUntil, history: this.#history });
    }
  }

  /**
   * Requests a caller started unpaced between `first` and `last`, told with
   * its next call (up to {@link UNPACED_LEASE_MS} later): spread evenly over
   * that span, so that the second before a 429 counts every caller's starts
   * in it, not only those of the callers that happened to call since.
   */
  #recordUnpaced(count: number, first: number, last: number): void {
    const steps = Math.min(count, UNPACED_SPREAD_STEPS);
    for (let i = 0; i < steps; i++) {
      const share = Math.floor(((i + 1) * count) / steps) - Math.floor((i * count) / steps);
      const at = steps === 1 ? last : first + ((last - first) * i) / (steps - 1);
      this.#history.record(at, { count: share, granted: false });
    }
  }

  /**
   * The provider says how much is left. Nothing left pauses every caller
   * until its reset, unless the gate's own requests fill the quota's window:
   * then the schedule already waits for the oldest to leave it (pacing just
   * under a quota of 10 a second fills it now and then), and a reset in whole
   * seconds would cost up to a second for nothing. A precise reset sets a
   * budget.
   */
  #remaining(remaining: Remaining & { ageMs: number }, now: number): void {
    if (remaining.resetMs === null) return;
    const sentAt = now - remaining.ageMs;
    if (remaining.requests === 0) {
      const quota = this.#rate.announcedQuota;
      const windowMs = this.#rate.windowMs();
      const ours = windowMs === null ? 0 : this.#history.started(sentAt - windowMs, sentAt);
      if (!quota || ours < Math.floor(quota.requests * OWN_WINDOW_SHARE)) this.#pause(now + remaining.resetMs);
      return;
    }
    if (remaining.resetMs < BUDGET_MIN_RESET_MS) return;
    // Slots started since the answered request was sent (and those leased ahead) are not in the provider's count yet.
    this.#budget = { left: remaining.requests - this.#history.started(sentAt, Infinity), until: now + remaining.resetMs };
  }

  /** How long a 429 that names no wait pauses: a few intervals of the pace, or a second when nothing paces the provider. */
  #bareWaitMs(policy: PacingPolicy): number {
    const rps = this.#rate.effective(policy);
    return rps === null ? BARE_429_WAIT_MS : Math.min(BARE_429_WAIT_MS, Math.max(50, (BARE_429_INTERVALS * 1000) / rps));
  }

  #pause(until: number): void {
    this.#pausedUntil = Math.max(this.#pausedUntil, until);
    this.#nextSlotAt = Math.max(this.#nextSlotAt, this.#pausedUntil);
  }

  /** Probing the provider: `probe` grants this caller the probe, `wait` holds it back until the probe's answer, `go` is normal pacing. */
  #firstContact(policy: PacingPolicy, caller: string, now: number): "probe" | "wait" | "go" {
    if (this.#heard || policy.requestsPerSecond !== null) return "go";
    if (this.#probe && now >= this.#probe.until) {
      // The probe's answer never came (its caller died, or the provider is slow): go on without it.
      this.#heard = true;
      this.#probe = null;
      return "go";
    }
    if (this.#probe) return "wait";
    this.#probe = { caller, until: now + PROBE_TIMEOUT_MS };
    return "probe";
  }

  /** When a slot asked for at `now` would start: after the pause, the slots leased ahead and a budget spent. */
  #nextStartAt(now: number): number {
    return this.#budgetAllows(Math.max(now, this.#pausedUntil, this.#paced ? this.#nextSlotAt : now));
  }

  /** The earliest start at or after `at` that the budget allows, forgetting a budget whose reset `at` has passed. */
  #withinBudget(at: number): number {
    if (this.#budget && at >= this.#budget.until) this.#budget = null;
    return this.#budgetAllows(at);
  }

  /** The earliest start at or after `at` that the budget allows: its reset, once nothing is left before it. */
  #budgetAllows(at: number): number {
    const budget = this.#budget;
    return budget && at < budget.until && budget.left <= 0 ? budget.until : at;
  }
}
