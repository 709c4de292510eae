/**
 * The leases one chunk attempt holds (its pending rows, its running receipts)
 * and the heartbeat that renews them in bulk: one call per shard per beat.
 * The play's own tool calls hold receipts the same way, with no rows
 * (runtime/invocation/play-calls.ts).
 *
 * The durable deadline is each lease's expiry in its shard (expired there by
 * alarm); the timers here only pace renewals while the attempt runs, and are
 * cleared when it stops. A beat that learns a lease was lost aborts the
 * attempt's signal, so its tool path stops calling providers; the coordinator
 * then redispatches the chunk under a new epoch, and fencing rejects this
 * attempt's late writes. The holder also stops by its own clock: leases not
 * confirmed by a beat before they would expire (a stalled heartbeat, shards
 * unreachable) abort the attempt too, so that it never calls a provider for
 * a receipt another attempt may already have taken over.
 */
import type { DispatchServices } from "../tools/services";
import { messageOf, TroupeError } from "../../core/errors";
import type { AttemptRef, LeaseResult } from "../../contracts/shards";
import type { RuntimePolicy } from "../../core/policy";
import { ReceiptClient, type ReceiptLeaseObserver, type SheetClient } from "../../clients/shards";
import { getOrInsert } from "../../core/collections";
import type { Log } from "../../contracts/events";

/** The attempt no longer owns some of its rows or receipts: it must stop, and its chunk be redispatched. */
export class LeaseLostError extends TroupeError {
  constructor(
    readonly attempt: AttemptRef,
    readonly keys: { rows: string[]; receipts: string[] },
    detail: string,
  ) {
    const count = keys.rows.length + keys.receipts.length;
    super("lease_lost", `attempt ${attempt.attemptId} ${detail}${count ? ` (${describeKeys(keys)})` : ""}`);
  }
}

/** "3 rows (a, b, c) and 1 receipt": counts with a few sample keys. */
export function describeKeys(keys: { rows: string[]; receipts: string[] }): string {
  const part = (what: string, list: string[], width: number) =>
    list.length
      ? `${list.length} ${what}${list.length === 1 ? "" : "s"} (${list
          .slice(0, 5)
          .map((k) => k.slice(0, width))
          .join(", ")}${list.length > 5 ? ", …" : ""})`
      : null;
  return [part("row", keys.rows, 80), part("receipt", keys.receipts, 14)].filter(Boolean).join(" and ");
}

/** What an attempt's leases need: the attempt, the shards to renew on, the lease policy, the run's signal. */
export interface AttemptLeasesOptions {
  attempt: AttemptRef;
  /** Null when the attempt holds no rows (the play's own calls). */
  sheets: SheetClient | null;
  /** Any client of the org's receipt shards: renewals are not tracked. */
  receipts: ReceiptClient;
  policy: Pick<RuntimePolicy, "rowLeaseTtlMs" | "receiptLeaseTtlMs" | "heartbeatIntervalMs">;
  /** The run's signal: the attempt stops with it too. */
  signal: AbortSignal;
  now(): number;
  log: Log;
}

/** Most keys one renewal carries (the shards' contract). */
const MAX_RENEW_KEYS = 5000;

/** One chunk attempt's leases; `start()` the heartbeat, `stop()` it when the attempt ends. */
export class AttemptLeases implements ReceiptLeaseObserver {
  #deps: AttemptLeasesOptions;
  #rows = new Set<string>();
  #receipts = new Map<number, Set<string>>();
  #controller = new AbortController();
  #timer: ReturnType<typeof setTimeout> | null = null;
  /** Fires when the leases confirmed last would expire (less a margin): the attempt stops. */
  #guard: ReturnType<typeof setTimeout> | null = null;
  #beating: Promise<void> | null = null;
  #stopped = false;
  #callsSettled = 0;
  /** When the leases were last known to be held (a claim or a whole successful beat). */
  #confirmedAt: number;
  /** Aborted when the run stops or this attempt lost a lease; the reason says which. */
  readonly signal: AbortSignal;

  constructor(options: AttemptLeasesOptions) {
    this.#deps = options;
    this.#confirmedAt = options.now();
    this.signal = AbortSignal.any([options.signal, this.#controller.signal]);
  }

  /** Why the attempt lost its leases, or null. */
  get lost(): LeaseLostError | null {
    return this.#controller.signal.aborted ? (this.#controller.signal.reason as LeaseLostError) : null;
  }

  /**
   * Calls of the attempt whose outcomes it learned since it started (a provider's answer stored, or a lookup's word
   * that a taken-over request never arrived): progress, though no row settled. A call stored as not sent is not one.
   */
  get callsSettled(): number {
    return this.#callsSettled;
  }

  holdRows(keys: Iterable<string>): void {
    for (const key of keys) this.#rows.add(key);
  }

  releaseRows(keys: Iterable<string>): void {
    for (const key of keys) this.#rows.delete(key);
  }

  /** A lookup learned that the provider never received a taken-over call's request: its claim need not ask again. */
  learned(): void {
    this.#callsSettled++;
  }

  claimed(shard: number, keys: string[]): void {
    const held = getOrInsert(this.#receipts, shard, () => new Set<string>());
    for (const key of keys) held.add(key);
  }

  finished(shard: number, keys: string[], answered: number): void {
    this.#callsSettled += answered;
    const held = this.#receipts.get(shard);
    for (const key of keys) held?.delete(key);
  }

  /**
   * Starts renewing every `heartbeatIntervalMs`, until `stop()`; after a `stop()`, starts again. Call right after the
   * claims (their leases start then), or before them.
   */
  start(): void {
    this.#stopped = false;
    this.#confirm(this.#deps.now());
    this.#schedule();
  }

  /** Stops renewing the receipts held now: the calls that claimed them have settled, and their leases lapse in their shards. */
  forgetReceipts(): void {
    this.#receipts.clear();
  }

  /** Stops the heartbeat and waits for a beat in flight: no timer or request outlives the attempt. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#guard) clearTimeout(this.#guard);
    this.#timer = this.#guard = null;
    await this.#beating;
  }

  /** One renewal of everything held; aborts the attempt when a lease is gone. */
  async beat(): Promise<void> {
    const { attempt, sheets, receipts, policy, now } = this.#deps;
    const startedAt = now();
    const rows = [...this.#rows];
    const held = [...this.#receipts].flatMap(([shard, keys]) => slices([...keys], MAX_RENEW_KEYS).map((batch) => ({ shard, keys: batch })));
    try {
      const [rowResult, ...receiptResults] = await Promise.all([
        rows.length && sheets ? sheets.renewLeases(attempt, rows, policy.rowLeaseTtlMs) : none(),
        ...held.map(({ shard, keys }) => receipts.renew(shard, { attempt, keys, leaseTtlMs: policy.receiptLeaseTtlMs })),
      ]);
      // A key finished (persisted, completed) while the beat was out is not lost.
      const lostRows = rowResult!.lost.filter((key) => this.#rows.has(key));
      const lostReceipts = receiptResults.flatMap((result, i) => result.lost.filter((key) => this.#receipts.get(held[i]!.shard)?.has(key)));
      if (lostRows.length || lostReceipts.length) {
        this.#lose(
          new LeaseLostError(
            attempt,
            { rows: lostRows, receipts: lostReceipts },
            "lost its leases: another attempt holds them now, or they expired",
          ),
        );
        return;
      }
      this.#confirm(startedAt);
    } catch (error) {
      // The guard stops the attempt if no beat succeeds before the leases would expire.
      this.#deps.log(
        `heartbeat of ${attempt.attemptId} failed (${messageOf(error)}); leases unconfirmed for ${now() - this.#confirmedAt} ms`,
      );
    }
  }

  /** The leases held at `at` were confirmed: they live a lease TTL from then. Re-arms the guard. */
  #confirm(at: number): void {
    if (this.#stopped || this.lost) return;
    this.#confirmedAt = at;
    const { policy, now, attempt } = this.#deps;
    const ttl = Math.min(policy.rowLeaseTtlMs, policy.receiptLeaseTtlMs);
    // Stop a little before the shards' clocks could expire the leases: a request sent then may still reach the provider first.
    const margin = Math.min(ttl / 10, 5_000);
    if (this.#guard) clearTimeout(this.#guard);
    this.#guard = setTimeout(
      () => {
        this.#guard = null;
        const keys = { rows: [...this.#rows], receipts: [...this.#receipts.values()].flatMap((held) => [...held]) };
        this.#lose(
          new LeaseLostError(attempt, keys, `could not confirm its leases within ${now() - this.#confirmedAt} ms, before they expire`),
        );
      },
      Math.max(0, at + ttl - margin - now()),
    );
  }

  #lose(error: LeaseLostError): void {
    if (this.#controller.signal.aborted || this.#stopped) return;
    this.#deps.log(error.message, "leases_lost");
    this.#controller.abort(error);
    if (this.#guard) clearTimeout(this.#guard);
    this.#guard = null;
  }

  #schedule(): void {
    // One timer at a time: a beat still out when the heartbeat starts again schedules the next one as it ends.
    if (this.#stopped || this.lost || this.#timer || this.#beating) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#beating = this.beat()
        .catch((error: unknown) => {
          // beat() handles its own failures; this is the object being torn down under it (its storage gone): say so, nowhere else to.
          console.error(`heartbeat of ${this.#deps.attempt.attemptId} stopped`, error);
        })
        .finally(() => {
          this.#beating = null;
          this.#schedule();
        });
    }, this.#deps.policy.heartbeatIntervalMs);
  }
}

/**
 * The invocation's dispatch services as one attempt sees them: its signal
 * (run or lease lost) and a receipt client that tells the attempt's leases
 * which receipts it holds.
 */
export function attemptServices(base: DispatchServices, leases: AttemptLeases): DispatchServices {
  const receipts = new ReceiptClient({
    env: base.env,
    org: base.run.org,
    shardCount: base.receipts.shardCount,
    meter: base.meter,
    faults: base.faults,
    leases,
  });
  return { ...base, signal: leases.signal, receipts, learned: () => leases.learned() };
}

async function none(): Promise<LeaseResult> {
  return { renewed: [], lost: [] };
}

function slices<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
