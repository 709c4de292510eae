/**
 * One object's outbound HTTP requests. Production allows an object at most
 * six requests waiting for their response headers at once; a seventh waits
 * its turn. {@link OutboundGate} is that rule as a counting semaphore, and
 * {@link withOutbound} makes an object's gate (and its name, which the
 * simulated provider is told) the one every outbound request made under it
 * takes a slot of: calls to the simulated provider (`src/sim/client.ts`) and
 * plays' `ctx.fetch` (`src/runtime/invocation/egress.ts`). Stub calls to our
 * own objects are not outbound requests and never wait here.
 *
 * The gate is ambient rather than passed down because the limit is: it belongs
 * to the object, whatever code of the object's invocations sends the request
 * (a tool's `execute`, a batch timer, a play's fetch).
 */
import { AsyncLocalStorage } from "node:async_hooks";

interface Waiter {
  grant(release: () => void): void;
}

/**
 * A counting semaphore with a FIFO queue: at most `limit` holders at once;
 * the rest wait in arrival order. A waiter whose signal aborts leaves the
 * queue (its place goes to the next); a released slot passes straight to the
 * oldest waiter.
 *
 * @example
 * const gate = new OutboundGate({ limit: 6 });
 * const response = await gate.hold(() => fetch(url, { signal }), signal);
 */
export class OutboundGate {
  readonly limit: number;
  #held = 0;
  #queue: Waiter[] = [];

  constructor(options: { limit: number }) {
    if (!(Number.isInteger(options.limit) && options.limit >= 1)) throw new RangeError("an outbound gate's limit is a positive integer");
    this.limit = options.limit;
  }

  /** Slots held now. */
  get inFlight(): number {
    return this.#held;
  }

  /** Requests waiting for a slot now. */
  get waiting(): number {
    return this.#queue.length;
  }

  /** Whether a request arriving now would wait for a slot. */
  get full(): boolean {
    return this.#held >= this.limit || this.#queue.length > 0;
  }

  /**
   * Takes a slot, waiting behind earlier callers if all are held. Resolves
   * with the slot's release (idempotent); rejects with the signal's reason,
   * holding nothing, if `signal` aborts first.
   */
  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (!this.full) {
      this.#held++;
      return Promise.resolve(this.#release());
    }
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        const at = this.#queue.indexOf(waiter);
        if (at >= 0) this.#queue.splice(at, 1);
        reject(signal!.reason);
      };
      const waiter: Waiter = {
        grant: (release) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(release);
        },
      };
      this.#queue.push(waiter);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Runs `send` holding a slot, and frees it when `send` settles, however it settles. */
  async hold<T>(send: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    const release = await this.acquire(signal);
    try {
      // Granted in the same turn the signal aborted: the slot goes back unused.
      signal?.throwIfAborted();
      return await send();
    } finally {
      release();
    }
  }

  #release(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.#queue.shift();
      // The slot passes to the oldest waiter as it is; only when nobody waits does the count drop.
      if (next) next.grant(this.#release());
      else this.#held--;
    };
  }
}

/** Who sends an object's outbound requests, and through which gate (none: nothing is limited, as in production). */
export interface Outbound {
  /** The object, as `<Class>:<name>` (`RunCoordinator:<runId>`): what the simulated provider records peaks under. */
  readonly caller: string;
  readonly gate: OutboundGate | null;
}

const current = new AsyncLocalStorage<Outbound>();

/** Runs `fn` (and everything it starts) as the object `outbound` describes. */
export function withOutbound<T>(outbound: Outbound, fn: () => T): T {
  return current.run(outbound, fn);
}

const stops = new AsyncLocalStorage<AbortSignal>();

/**
 * Runs `fn` so that the requests it sends are never sent once `stop` aborts:
 * one still waiting for a slot leaves the queue (rejecting with the stop's
 * reason), and none starts after it. A request already sent is not touched
 * (its own signal governs it). A chunk attempt that lost its leases, or a
 * cancelled invocation, thus sends nothing it had queued: another attempt
 * may own those calls by then.
 */
export function withSendStop<T>(stop: AbortSignal, fn: () => T): T {
  return stops.run(stop, fn);
}

/** What hears the requests made under {@link withSendHooks}: as one starts to wait for a slot, and as it goes out. */
export interface SendHooks {
  /** The object's six slots are held: it waits for one (under emulated limits only). */
  waiting?(): void;
  /** It goes out now (after any wait), just before it is sent; may throw to refuse it (the subrequest cap). */
  sent?(): void;
}

const sendHooks = new AsyncLocalStorage<readonly SendHooks[]>();

/**
 * Runs `fn` so that `hooks` hear each request it makes wait for a slot and go
 * out. Hooks of enclosing calls hear them too, outermost first; a `sent` that
 * throws refuses the request, and the hooks inside it hear nothing. A provider
 * request is counted as it goes out, so one dropped while it waited is not
 * counted as made; its timeout does not run while it waits.
 */
export function withSendHooks<T>(hooks: SendHooks, fn: () => T): T {
  return sendHooks.run([...(sendHooks.getStore() ?? []), hooks], fn);
}

/**
 * Sends one outbound request as the current object: through its gate, the
 * slot held until `send` settles (`fetch` settles when the response headers
 * arrive: read the body after). `send` is told the caller's name, or null
 * outside any object's {@link withOutbound}. `signal` is the request's own
 * (it may abort a request in flight); a {@link withSendStop} around the call
 * stops it only before it is sent.
 */
export async function sendOutbound<T>(send: (caller: string | null) => Promise<T>, signal?: AbortSignal): Promise<T> {
  const outbound = current.getStore();
  const stop = stops.getStore();
  const caller = outbound?.caller ?? null;
  const hooks = sendHooks.getStore() ?? [];
  const go = () => {
    for (const hook of hooks) hook.sent?.();
    return send(caller);
  };
  if (!outbound?.gate) {
    stop?.throwIfAborted();
    return go();
  }
  if (outbound.gate.full) for (const hook of hooks) hook.waiting?.();
  // While it waits, the stop or its own signal takes it out of the queue; once granted, only its own signal governs it.
  return outbound.gate.hold(go, stop && signal ? AbortSignal.any([stop, signal]) : (stop ?? signal));
}

/**
 * `fetch` as one outbound request of the current object ({@link sendOutbound}),
 * aborted by `signal` unless `init.signal` is given: what a tool's call is
 * given to reach its provider (`ToolCall.fetch`).
 */
export function outboundFetch(signal: AbortSignal): (input: RequestInfo | URL, init?: RequestInit) => Promise<Response> {
  return (input, init) => {
    const own = init?.signal ?? signal;
    return sendOutbound(() => fetch(input, { ...init, signal: own }), own);
  };
}
