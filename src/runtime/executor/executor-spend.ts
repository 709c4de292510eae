/**
 * An executor's view of its run's spend. Reservations stay in memory (they
 * are not money); a bill goes to the executor's outbox in the same step, so
 * it reaches the coordinator's ledger even if the executor dies before its
 * next report. Under a cap, the attempt spends only what the coordinator
 * granted it (a reservation there, under the run's cap): past it, it asks
 * for more, and a refusal is the run's {@link SpendCapReached}.
 */
import type { BilledRequest, SpendGrant } from "../../contracts/executors";
import { toMicros } from "../../stores/spend-store";
import { sleep } from "../../core/time";
import { type BillableRequest, MAX_GRANT_WAIT_MS, SpendCapReached, type SpendLedger } from "../tools/spend";

/** A grant asks for this many times the request that needed it, so that the attempt asks rarely. */
const GRANT_MULTIPLE = 25;

export interface ExecutorSpendOptions {
  /** The attempt spending: its bills name it as the grant they used. */
  attemptId: string;
  /** Whether the run has a cap (without one, nothing is asked). */
  capped: boolean;
  /** Asks the coordinator for up to `wantedMicros` more. */
  grant(wantedMicros: number): Promise<SpendGrant>;
  /** Keeps a bill durably until it is reported. */
  keep(bill: BilledRequest): void;
  /** Granted to the attempt before, and not used: a wound-down attempt going on (AttemptResume). */
  grantedMicros?: number;
  /** The attempt's: a reservation waiting for a grant stops with it. */
  signal?: AbortSignal;
}

export class ExecutorSpend implements SpendLedger {
  #deps: ExecutorSpendOptions;
  #reserved = new Map<string, BillableRequest>();
  #billed = new Set<string>();
  #grantedMicros = 0;
  /** Reserved and billed by this attempt (what counts against its grant). */
  #usedMicros = 0;
  /** One grant request at a time: concurrent reservations wait for it, then check again. */
  #asking: Promise<SpendGrant> | null = null;

  constructor(options: ExecutorSpendOptions) {
    this.#deps = options;
    this.#grantedMicros = options.grantedMicros ?? 0;
  }

  /** Granted and neither billed nor reserved: what the attempt may still spend without asking. */
  get unusedMicros(): number {
    return Math.max(0, this.#grantedMicros - this.#usedMicros);
  }

  /** `signal`: the call's (its attempt lost its leases, say): a wait for a grant stops with it too. */
  async reserve(request: BillableRequest, signal?: AbortSignal): Promise<void> {
    if (this.#reserved.has(request.requestKey) || this.#billed.has(request.requestKey)) return;
    const micros = toMicros(request.credits);
    let waitedMs = 0;
    while (this.#deps.capped && this.#usedMicros + micros > this.#grantedMicros) {
      const grant = await this.#ask(Math.max(micros, micros * GRANT_MULTIPLE));
      if (this.#usedMicros + micros <= this.#grantedMicros) break;
      if (grant.grantedMicros <= 0 && grant.waitMs !== undefined && waitedMs < MAX_GRANT_WAIT_MS) {
        // Others hold what the cap has left, and will bill it or give it back: the cap is not reached yet.
        const stop = [this.#deps.signal, signal].filter((s) => s !== undefined);
        await sleep(grant.waitMs, stop.length > 1 ? AbortSignal.any(stop) : stop[0]);
        waitedMs += grant.waitMs;
        continue;
      }
      if (grant.grantedMicros <= 0) {
        const cap = grant.cap ?? { credits: 0, reason: "maxSpend" as const };
        throw cap.reason === "daily"
          ? new SpendCapReached(grant.spentCredits, cap.limit ?? cap.credits, "daily")
          : new SpendCapReached(grant.spentCredits, cap.credits, cap.reason);
      }
    }
    this.#reserved.set(request.requestKey, request);
    this.#usedMicros += micros;
  }

  /** One grant request at a time; what it grants is added once, by the request itself. */
  #ask(wantedMicros: number): Promise<SpendGrant> {
    this.#asking ??= this.#deps
      .grant(wantedMicros)
      .then((grant) => {
        this.#grantedMicros += grant.grantedMicros;
        return grant;
      })
      .finally(() => {
        this.#asking = null;
      });
    return this.#asking;
  }

  bill(requestKey: string): void {
    const request = this.#reserved.get(requestKey);
    if (!request) return;
    this.#reserved.delete(requestKey);
    this.#billed.add(requestKey);
    this.#deps.keep(this.#deps.capped ? { ...request, grantOf: this.#deps.attemptId } : request);
  }

  release(requestKey: string): void {
    const request = this.#reserved.get(requestKey);
    if (!request) return;
    this.#reserved.delete(requestKey);
    this.#usedMicros -= toMicros(request.credits);
  }

  recordBilled(request: BillableRequest): void {
    if (this.#billed.has(request.requestKey)) return;
    if (this.#reserved.has(request.requestKey)) {
      this.bill(request.requestKey);
      return;
    }
    // Reserved under no grant of this attempt: it shrinks none.
    this.#billed.add(request.requestKey);
    this.#deps.keep(request);
  }
}
