/**
 * When an executor invocation winds its running attempts down: once its
 * subrequests pass the policy's `executorWindDownSubrequests`, or its wall
 * clock `executorWindDownMs` (production: 8,000 and 12 minutes, the
 * platform's 10,000 and 15 minutes less what the requests in flight, their
 * receipts, the rows' persist and the reports need). An attempt started
 * under the platform's limits may run past them (a chunk of 1,000 rows, a
 * provider paced at a request every few seconds); wound down, it sends no
 * request more, stores what it computed and goes on in a fresh invocation.
 */
import { TroupeError } from "../../core/errors";
import type { SubrequestMeter } from "../../core/meter";
import type { RuntimePolicy } from "../../core/policy";

type Limits = Pick<RuntimePolicy, "executorWindDownSubrequests" | "executorWindDownMs">;

export class WindDown {
  #controller = new AbortController();
  /** Aborted once the invocation's attempts must wind down. */
  readonly signal = this.#controller.signal;
  #meter: SubrequestMeter;
  #startedAt: number;
  #now: () => number;
  #subrequests: number;
  #ms: number;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #unwatch: () => void;

  /** `startedAt`: when the invocation started (now by default). */
  constructor(options: { meter: SubrequestMeter; limits: Limits; now(): number; startedAt?: number }) {
    this.#meter = options.meter;
    this.#now = options.now;
    this.#startedAt = options.startedAt ?? options.now();
    this.#subrequests = options.limits.executorWindDownSubrequests;
    this.#ms = options.limits.executorWindDownMs;
    this.#unwatch = options.meter.watch(() => this.#check());
    this.#arm();
  }

  /** Lowers the limits to a run's policy's (read with each attempt's source: test runs shrink them). */
  limit(limits: Limits): void {
    if (limits.executorWindDownSubrequests >= this.#subrequests && limits.executorWindDownMs >= this.#ms) return;
    this.#subrequests = Math.min(this.#subrequests, limits.executorWindDownSubrequests);
    this.#ms = Math.min(this.#ms, limits.executorWindDownMs);
    this.#arm();
    this.#check();
  }

  /** Stops watching: the invocation is over. */
  close(): void {
    this.#unwatch();
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
  }

  #arm(): void {
    if (this.#timer) clearTimeout(this.#timer);
    if (this.signal.aborted) return;
    this.#timer = setTimeout(() => this.#check(), Math.max(0, this.#startedAt + this.#ms - this.#now()));
  }

  #check(): void {
    if (this.signal.aborted) return;
    const total = this.#meter.total;
    const elapsed = this.#now() - this.#startedAt;
    if (total < this.#subrequests && elapsed < this.#ms) return;
    const why = total >= this.#subrequests ? `${total} subrequests` : `${elapsed} ms`;
    this.#controller.abort(new TroupeError("wound_down", `this executor invocation has spent ${why}; its attempts go on in a fresh one`));
    this.close();
  }
}

/**
 * A wind-down at a time alone: `signal` aborts with `reason()` at `at` (at
 * once if it has passed); `close` clears its timer. A coordinator's drain
 * has the attempts its executors run wind down so.
 */
export function windDownAt(at: number, options: { now(): number; reason(): unknown }): { signal: AbortSignal; close(): void } {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(options.reason()), Math.max(0, at - options.now()));
  return { signal: controller.signal, close: () => clearTimeout(timer) };
}
