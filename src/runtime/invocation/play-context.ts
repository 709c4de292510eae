/** The engine behind `PlayContext`: what a play's `run(ctx, input)` calls. */
import { AsyncLocalStorage } from "node:async_hooks";
import type {
  DatasetHandle,
  FieldSet,
  MapOptions,
  MapRows,
  PlayContext,
  RowContext,
  RunPlayOptions,
  ToolCallOptions,
} from "../../play/types";
import type { JournalStore } from "../../stores/journal-store";
import { type EffectCall, type EffectKind, Effects } from "./effects";
import type { ChildPlays } from "./child-plays";
import type { MapRunner } from "../map/map-runner";
import { refusedIn } from "../map/chunk-executor";
import type { PlayFetch, SecretValues } from "./play-fetch";
import { AttemptLeases } from "../map/attempt-leases";
import { ReceiptClient } from "../../clients/shards";
import { PlayCalls } from "./play-calls";
import type { Waits } from "./waits";
import type { InvocationScope } from "./scope";
import { callIdentity, type EffectTrace, fetchIdentity } from "./effect-trace";

/** Child plays, waits and fetch for one invocation (see src/runtime/invocation/child-plays.ts, waits.ts, play-fetch.ts). */
export interface PlayServices {
  children: ChildPlays;
  waits: Waits;
  egress: PlayFetch;
  /** Secret header values sent by `fetch`: redacted from log lines. */
  secrets: SecretValues;
  /** Counts play-level log lines, so that a replay does not append one twice. */
  journal: JournalStore;
  /** Aborted when a row's child makes this invocation yield. */
  suspended: AbortSignal;
}

/**
 * The row whose field function is running, across its awaits: a field
 * function that calls the play's own `ctx` (a closure) instead of its row
 * context still acts for its row.
 */
const rowScope = new AsyncLocalStorage<RowContext>();

export class RunContext implements PlayContext {
  readonly runId: string;
  readonly org: string;
  #maps: MapRunner;
  /** The play's own tool calls, their receipts under leases (play-calls.ts). */
  #calls: PlayCalls;
  #log: (line: string) => void;
  #services: PlayServices;
  #effects = new Effects();
  /** The play-level effects not settled yet (one that must wait never settles in its invocation), and how many were made. */
  #inFlight = new Set<Promise<unknown>>();
  #made = 0;

  #trace: EffectTrace;

  constructor(options: {
    scope: InvocationScope;
    maps: MapRunner;
    /** The play's own calls in this invocation ({@link playCalls}). */
    calls: PlayCalls;
    services: PlayServices;
    trace: EffectTrace;
  }) {
    this.#trace = options.trace;
    this.runId = options.scope.run.runId;
    this.org = options.scope.run.org;
    this.#maps = options.maps;
    this.#calls = options.calls;
    this.#log = options.scope.log;
    this.#services = options.services;
  }

  map(name: string, rows: MapRows, fields: FieldSet, options?: MapOptions): Promise<DatasetHandle> {
    return this.#effect("map", name, {
      play: () => {
        const withServices: FieldSet = {};
        for (const [field, fn] of Object.entries(fields)) {
          withServices[field] = async (row, rc) => {
            const context = this.#rowContext(rc);
            const value = await rowScope.run(context, () => fn(row, context));
            // A value computed while the invocation yields may rest on a caught yield: the row runs again instead.
            this.#services.suspended.throwIfAborted();
            return value;
          };
        }
        return this.#maps.map(name, rows, withServices, options);
      },
    });
  }

  runPlay<T = unknown>(play: string, input: unknown, options: RunPlayOptions = {}): Promise<T> {
    return this.#effect(
      "child",
      String(play),
      {
        play: () => this.#services.children.run(play, input, options, null) as Promise<T>,
        row: (row) => row.runPlay<T>(play, input, options),
      },
      [input, options],
    );
  }

  waitForEvent<T = unknown>(eventKey: string, options?: { timeoutMs?: number }): Promise<T> {
    return this.#effect("wait", String(eventKey), { play: (call) => this.#services.waits.waitForEvent<T>(eventKey, call, options) });
  }

  sleep(ms: number): Promise<void> {
    return this.#effect("sleep", "", { play: (call) => this.#services.waits.sleep(ms, call) });
  }

  fetch(url: string | URL, init?: RequestInit): Promise<Response> {
    return this.#effect(
      "fetch",
      "",
      {
        // Kept for the invocation's executors: a replay up to a map after it reads the response the play read.
        play: () => this.#services.egress.fetch(url, init).then((response) => this.#trace.keep(response)),
        row: (row) => row.fetch!(url, init),
      },
      fetchIdentity(url, init),
    );
  }

  tool<T = unknown>(toolId: string, input: unknown, options?: ToolCallOptions): Promise<T> {
    return this.#effect(
      "tool",
      String(toolId),
      {
        play: () => this.#calls.call(toolId, input, options) as Promise<T>,
        row: (row) => row.tool<T>(toolId, input, options),
      },
      [input, options ?? {}],
    );
  }

  /**
   * Resolves once the play can go on only through its calls held by `waits` (they never settle in this invocation):
   * none of its other effects is in flight, and a turn of the event loop saw it make none.
   */
  async stalled(waits: Pick<Waits, "holds" | "nextHold">): Promise<void> {
    for (;;) {
      if (this.#inFlight.size > waits.holds) {
        // One settles, or one more is held.
        await Promise.race([waits.nextHold(), ...[...this.#inFlight].map((effect) => effect.then(noop, noop))]);
        continue;
      }
      const made = this.#made;
      // The play's reactions to what settled last run first (microtasks), and may make more calls.
      await new Promise((resolve) => setTimeout(resolve, 0));
      if (this.#made === made && this.#inFlight.size <= waits.holds) return;
    }
  }

  /** Play-level lines are counted in the journal: a replay skips the lines it already appended. */
  log(...args: unknown[]): void {
    this.#effect("log", "", {
      play: (call) => {
        const { journal, secrets } = this.#services;
        if (call.ordinal < journal.counter("play_log")) return;
        journal.bump("play_log");
        this.#log(secrets.redact(args.map((a) => (typeof a === "string" ? a : safeStringify(a))).join(" ")));
      },
      row: (row) => row.log(...args),
    });
  }

  /**
   * Every effect goes through here ({@link Effects}): in a field function the
   * row's own, at play level with its place in the play. An effect refused
   * where it was made rejects (or, for a log line, throws).
   */
  #effect<T>(kind: EffectKind, name: string, at: { play(call: EffectCall): T; row?(row: RowContext): T }, input?: unknown): T {
    const row = rowScope.getStore();
    try {
      const play = (call: EffectCall) => {
        const result = at.play(call);
        // What an executor replays to reach a map (runtime/executor/capture.ts).
        this.#trace.record(call, result, input === undefined ? null : callIdentity(input));
        this.#made++;
        if (result instanceof Promise) {
          this.#inFlight.add(result);
          const settled = () => void this.#inFlight.delete(result);
          result.then(settled, settled);
        }
        return result;
      };
      return this.#effects.make(kind, name, row !== undefined, { play, row: row && at.row ? () => at.row!(row) : undefined });
    } catch (error) {
      if (kind === "log") throw error;
      return Promise.reject(error) as T;
    }
  }

  /** The executor's row context plus child plays and fetch (the executor itself knows only tools). */
  #rowContext(rc: RowContext): RowContext {
    const { children, egress, secrets } = this.#services;
    return {
      rowKey: rc.rowKey,
      signal: rc.signal,
      tool: rc.tool,
      log: (...args: unknown[]) => rc.log(...args.map((a) => secrets.redact(typeof a === "string" ? a : safeStringify(a)))),
      runPlay: (play, input, options = {}) => refusing(rc, () => children.run(play, input, options, rc.rowKey) as Promise<any>),
      fetch: (url, init) => refusing(rc, () => egress.fetch(url, init)),
    };
  }
}

/**
 * The play's calls in `scope`, their attempts carrying the invocation's id: every generation's scheduler shares one
 * set of map-wide guards (one latch). The invocation ends them as it ends (`PlayCalls.end`).
 */
export function playCalls(scope: InvocationScope, maps: MapRunner, attemptSeq: () => number, invocation: string): PlayCalls {
  const { env, run, policy, meter, faults, signal, now, log } = scope;
  // Renewals only: the receipts each generation holds are reported to its leases by its scheduler's own client.
  const receipts = new ReceiptClient({ env, org: run.org, shardCount: policy.receiptShards, meter, faults });
  const guards = maps.guards();
  return new PlayCalls({
    runId: run.runId,
    attemptSeq,
    invocation,
    signal,
    leases: (attempt, stop) => new AttemptLeases({ attempt, sheets: null, receipts, policy, signal: stop, now, log }),
    scheduler: (attempt, leases) => maps.scheduler(attempt, guards, undefined, leases),
  });
}

/**
 * A row's effect, refused once its attempt stopped (a cancel, lost leases, a wind-down: the row's signal), before or
 * as it fails: the row is not stored, whatever its field makes of the refusal.
 */
async function refusing<T>(rc: RowContext, effect: () => Promise<T>): Promise<T> {
  if (rc.signal.aborted) {
    refusedIn(rc);
    throw rc.signal.reason;
  }
  try {
    return await effect();
  } catch (error) {
    if (rc.signal.aborted) refusedIn(rc);
    throw error;
  }
}

function noop(): void {}

/** A log argument as text: JSON, or its string form when JSON cannot hold it. */
export function safeStringify(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    // Cycles and BigInts still deserve a log line.
    return String(value);
  }
}
