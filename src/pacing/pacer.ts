/**
 * The caller's side of a pacing gate: one `Pacer` per (invocation, provider).
 * Calls wait here for a slot; the pacer leases slots and concurrency units
 * from the gate in bulk (one gate call for many provider requests) and hands
 * them out in order, each at its start time.
 */
import { ToolCallError } from "../play/tool-error";
import { messageOf } from "../shared/errors";
import type { Grant } from "./gate";
import type { PacingPolicy } from "./policy";

/** The gate as a pacer needs it (the PacingGate stub, bound to one provider). */
export interface GateClient {
  acquire(request: { caller: string; slots: number; inFlight: number; units: number }): Promise<Grant>;
  report(request: { retryAfterMs: number }): Promise<void>;
  release(request: { caller: string }): Promise<void>;
}

/** One provider request's permission to go: release it when the request ends. */
export interface PacerSlot {
  release(): void;
}

/** The gate to lease from, this caller's id, and the policy assumed until the gate answers. */
export interface PacerOptions {
  gate: GateClient;
  /** Unique per invocation of a run. */
  caller: string;
  /** Assumed until the gate's first answer. */
  policy: PacingPolicy;
  now(): number;
  log(line: string): void;
}

interface Waiter {
  resolve(slot: PacerSlot): void;
  reject(error: unknown): void;
  signal: AbortSignal;
  onAbort(): void;
}

/** Units asked for beyond the requests waiting, so a trickle of calls does not ask the gate each time. */
const UNIT_HEADROOM = 16;
/** A pacer refused concurrency units asks the gate again after this long. */
const UNIT_RETRY_MS = 50;
/** Idle this long with units held, the pacer gives them back. */
const IDLE_RELEASE_MS = 250;

/** Hands out pacing slots in order; see the module comment. */
export class Pacer {
  #o: PacerOptions;
  #policy: PacingPolicy;
  /** Leased slot start times (local clock), ascending. */
  #stock: number[] = [];
  /** Concurrency units held; 0 until the gate grants some, null when unlimited. */
  #units: number | null = 0;
  #inFlight = 0;
  #waiters: Waiter[] = [];
  #leasing = false;
  #retryTimer: ReturnType<typeof setTimeout> | null = null;
  #idleTimer: ReturnType<typeof setTimeout> | null = null;
  /** Slots that start before this were leased before a 429: they are dropped. */
  #pausedUntil = 0;
  /** Until this local time the gate said nothing paces the provider: requests need only a unit. */
  #unpacedUntil = 0;

  constructor(options: PacerOptions) {
    this.#o = options;
    this.#policy = options.policy;
  }

  /** The policy the gate answered with last (the default before its first answer). */
  get policy(): PacingPolicy {
    return this.#policy;
  }

  /** Waits for a slot (its start time and a concurrency unit). */
  slot(signal: AbortSignal): Promise<PacerSlot> {
    signal.throwIfAborted();
    return new Promise<PacerSlot>((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        signal,
        onAbort: () => {
          this.#waiters = this.#waiters.filter((w) => w !== waiter);
          reject(signal.reason);
        },
      };
      signal.addEventListener("abort", waiter.onAbort, { once: true });
      this.#waiters.push(waiter);
      this.#pump();
    });
  }

  /**
   * The provider answered 429: drop the slots leased before it and tell the
   * gate, which slows every caller of the provider.
   */
  async backpressure(retryAfterMs: number): Promise<void> {
    this.#pausedUntil = Math.max(this.#pausedUntil, this.#o.now() + retryAfterMs);
    this.#unpacedUntil = 0;
    this.#stock = this.#stock.filter((at) => at >= this.#pausedUntil);
    await this.#o.gate.report({ retryAfterMs });
  }

  /** Gives the concurrency units back (end of the invocation). */
  async close(): Promise<void> {
    if (this.#idleTimer) clearTimeout(this.#idleTimer);
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    if (this.#units === 0) return;
    this.#units = 0;
    await this.#o.gate.release({ caller: this.#o.caller });
  }

  #pump(): void {
    if (this.#idleTimer) {
      clearTimeout(this.#idleTimer);
      this.#idleTimer = null;
    }
    while (this.#waiters.length > 0) {
      const unitFree = this.#units === null || this.#inFlight < this.#units;
      const unpaced = this.#o.now() < this.#unpacedUntil;
      if ((this.#stock.length === 0 && !unpaced) || !unitFree) {
        this.#lease();
        return;
      }
      const at = this.#stock.shift() ?? this.#o.now();
      const waiter = this.#waiters.shift()!;
      this.#inFlight++;
      const delay = at - this.#o.now();
      if (delay <= 0) this.#grant(waiter, at);
      else setTimeout(() => this.#grant(waiter, at), delay);
    }
  }

  /** Hands a slot over at its start time, unless a 429 arrived meanwhile (then the waiter queues again). */
  #grant(waiter: Waiter, at: number): void {
    if (waiter.signal.aborted || at < this.#pausedUntil) {
      this.#inFlight--;
      if (!waiter.signal.aborted) this.#waiters.unshift(waiter);
      this.#pump();
      return;
    }
    waiter.signal.removeEventListener("abort", waiter.onAbort);
    let released = false;
    waiter.resolve({
      release: () => {
        if (released) return;
        released = true;
        this.#inFlight--;
        this.#pump();
        this.#armIdleRelease();
      },
    });
  }

  /** Asks the gate for slots and units; deferred a microtask so a burst of waiters shares one call. */
  #lease(): void {
    if (this.#leasing || this.#retryTimer) return;
    this.#leasing = true;
    queueMicrotask(() => this.#acquire());
  }

  #acquire(): void {
    const slots = Math.max(0, this.#waiters.length - this.#stock.length);
    const units = this.#inFlight + this.#waiters.length + UNIT_HEADROOM;
    this.#o.gate
      .acquire({ caller: this.#o.caller, slots, inFlight: this.#inFlight, units })
      .then(
        (grant) => {
          this.#leasing = false;
          const now = this.#o.now();
          this.#policy = grant.policy;
          this.#units = grant.units;
          this.#unpacedUntil = grant.unpacedForMs > 0 ? now + grant.unpacedForMs : 0;
          for (const offset of grant.startInMs) if (now + offset >= this.#pausedUntil) this.#stock.push(now + offset);
          // Without a free unit, wait for one of ours to end (release pumps) or for others' to lapse (the timer).
          const blocked = this.#units !== null && this.#inFlight >= this.#units;
          if (blocked || (grant.retryInMs !== null && grant.startInMs.length === 0)) {
            this.#retryTimer = setTimeout(() => {
              this.#retryTimer = null;
              this.#pump();
            }, Math.max(grant.retryInMs ?? 0, blocked ? UNIT_RETRY_MS : 0));
          }
          this.#pump();
        },
        (error: unknown) => {
          this.#leasing = false;
          this.#o.log(`pacing gate unreachable: ${messageOf(error)}; the calls waiting for it fail retryably`);
          const failure = new ToolCallError({ code: "pacing_unavailable", message: `the pacing gate could not be reached: ${messageOf(error)}`, retryable: true });
          for (const waiter of this.#waiters.splice(0)) {
            waiter.signal.removeEventListener("abort", waiter.onAbort);
            waiter.reject(failure);
          }
        },
      );
  }

  #armIdleRelease(): void {
    if (this.#inFlight > 0 || this.#waiters.length > 0 || this.#units === 0 || this.#units === null || this.#idleTimer) return;
    this.#idleTimer = setTimeout(() => {
      this.#idleTimer = null;
      if (this.#inFlight > 0 || this.#waiters.length > 0) return;
      this.close().catch((error: unknown) => this.#o.log(`could not return pacing units (they lapse by themselves): ${messageOf(error)}`));
    }, IDLE_RELEASE_MS);
  }
}
