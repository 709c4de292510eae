/**
 * How an executor gets a map's field functions: they are closures of the
 * play's own code, so it runs the play from the top, as every invocation of
 * the run does, with a context that replays each play-level effect from what
 * the coordinator's invocation recorded (effect-trace.ts) and stops at the
 * call of the map it was given a chunk of. An effect that had not settled
 * there never settles here: the play waits, and only the map it reached
 * matters. Play code is deterministic outside `ctx` (DESIGN.md), so it calls
 * the same effects in the same order and reaches the same map with the same
 * closures.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { TerminalError, TroupeError } from "../../core/errors";
import type { CaptureSource } from "../../clients/executors";
import type { TracedEffect, TracedMap, TracedResponse } from "../../contracts/executors";
import type {
  DatasetHandle,
  FieldSet,
  MapOptions,
  MapRows,
  PlayContext,
  PlayDefinition,
  Row,
  RowContext,
  RunPlayOptions,
  ToolCallOptions,
} from "../../play/types";
import { type EffectCall, type EffectKind, Effects } from "../invocation/effects";
import { callIdentity, fetchIdentity, replayedResponse, tracedError, UNREPLAYABLE } from "../invocation/effect-trace";

/** The map's fields and options, as the play passed them. */
export interface CapturedMap {
  fields: FieldSet;
  options: MapOptions;
  /**
   * Runs a field function as its row: a field that calls the play's own
   * `ctx` (a closure) instead of its row context still acts for its row.
   */
  asRow<T>(row: RowContext, fn: () => T): T;
}

/** The play cannot be replayed here up to the map (a fetch before it past the bytes kept, say): the map runs in the coordinator. */
export class CaptureUnsupported extends TroupeError {
  constructor(message: string) {
    super("capture_unsupported", message);
  }
}

/** Runs `play` up to `ctx.map(target)` and answers its fields; rejects when the play ends, throws or diverges first. */
export async function captureMap(
  play: PlayDefinition,
  source: CaptureSource,
  target: string,
  readRows: (map: TracedMap, offset: number, limit: number) => Promise<Row[]>,
): Promise<CapturedMap> {
  const ctx = new CaptureContext(source, target, readRows);
  const ran = Promise.resolve()
    .then(() => play.run(ctx, JSON.parse(source.inputJson)))
    .then(() => {
      throw new TerminalError("nondeterministic_play", `the play ended without calling ctx.map("${target}") when replayed`);
    });
  return Promise.race([ctx.captured, ran]);
}

/**
 * A promise that never settles, made for each replay that parks the play: a
 * shared one would hold every parked play (its frame, its context, the
 * attempt they reach) in its reactions for as long as the isolate lives,
 * where a promise of its own is collected with the replay.
 */
function never(): Promise<never> {
  return new Promise<never>(() => {});
}

class CaptureContext implements PlayContext {
  readonly runId: string;
  readonly org: string;
  readonly captured: Promise<CapturedMap>;
  #resolve!: (map: CapturedMap) => void;
  #reject!: (error: unknown) => void;
  #effects = new Effects();
  #rows = new AsyncLocalStorage<RowContext>();
  #traced: Map<string, TracedEffect>;
  #maps: Map<string, TracedMap>;

  constructor(
    private readonly source: CaptureSource,
    private readonly target: string,
    private readonly readRows: (map: TracedMap, offset: number, limit: number) => Promise<Row[]>,
  ) {
    this.runId = source.run.runId;
    this.org = source.run.org;
    this.captured = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    this.#traced = new Map(source.effects.map((effect) => [slot(effect), effect]));
    this.#maps = new Map(source.maps.map((map) => [map.name, map]));
  }

  map(name: string, _rows: MapRows, fields: FieldSet, options: MapOptions = {}): Promise<DatasetHandle> {
    return this.#replay("map", name, (call) => {
      if (name === this.target) {
        this.#resolve({ fields, options, asRow: (row, fn) => this.#rows.run(row, fn) });
        return never();
      }
      return this.#settled(call, () => this.#handle(name));
    });
  }

  tool<T = unknown>(toolId: string, input: unknown, options?: ToolCallOptions): Promise<T> {
    return this.#replay(
      "tool",
      String(toolId),
      (call) => this.#settled(call, (value) => value as T, callIdentity([input, options ?? {}])),
      (row) => row.tool<T>(toolId, input, options),
    );
  }

  runPlay<T = unknown>(play: string, input: unknown, options: RunPlayOptions = {}): Promise<T> {
    return this.#replay(
      "child",
      String(play),
      (call) => this.#settled(call, (value) => value as T, callIdentity([input, options])),
      (row) => row.runPlay<T>(play, input, options),
    );
  }

  waitForEvent<T = unknown>(eventKey: string): Promise<T> {
    return this.#replay("wait", String(eventKey), (call) => this.#settled(call, (value) => value as T));
  }

  sleep(): Promise<void> {
    return this.#replay("sleep", "", (call) => this.#settled(call, () => undefined));
  }

  fetch(url: string | URL, init?: RequestInit): Promise<Response> {
    return this.#replay(
      "fetch",
      "",
      (call) => this.#settled(call, (value) => replayedResponse(value as TracedResponse), callIdentity(fetchIdentity(url, init))),
      (row) => row.fetch(url, init),
    );
  }

  log(...args: unknown[]): void {
    this.#rows.getStore()?.log(...args);
  }

  /** At play level, the recorded outcome; inside a field function, its row's own effect (waits are refused there). */
  #replay<T>(kind: EffectKind, name: string, at: (call: EffectCall) => Promise<T>, inRow?: (row: RowContext) => Promise<T>): Promise<T> {
    const row = this.#rows.getStore();
    try {
      if (row && inRow) return inRow(row);
      return this.#effects.make(kind, name, row !== undefined, { play: at });
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * The recorded outcome of `call` (made with `input`, for a tool or a child): its value, its error, or never (it had
   * not settled, so the play had not gone past it).
   */
  #settled<T>(call: EffectCall, value: (recorded: unknown) => T, input: string | null = null): Promise<T> {
    const traced = this.#recorded(call, input);
    if (!traced?.outcome) return never();
    const { outcome } = traced;
    // A copy for each replay: an executor replays the play once per attempt, and a play may change an answer in place.
    if (outcome.ok) return Promise.resolve(value(call.kind === "fetch" ? outcome.value : structuredClone(outcome.value)));
    if (outcome.code === UNREPLAYABLE) {
      const error = new CaptureUnsupported(
        `the play makes a ${call.kind} (${call.name || "unnamed"}) before ctx.map("${this.target}"); ${outcome.message}`,
      );
      this.#reject(error);
      return never();
    }
    return Promise.reject(tracedError(outcome));
  }

  /**
   * The recorded effect of `call`: the one in its place, or, when that one was
   * made with another input (calls of one tool made at once, numbered as their
   * inputs became known, which here is another order), the one made with its own.
   */
  #recorded(call: EffectCall, input: string | null): TracedEffect | undefined {
    const traced = this.#traced.get(slot(call));
    if (!traced || input === null || traced.input == null || traced.input === input) return traced;
    const same = this.source.effects.find((effect) => effect.kind === call.kind && effect.name === call.name && effect.input === input);
    if (same) return same;
    const error = new CaptureUnsupported(
      `the play's ${call.kind} calls of "${call.name}" before ctx.map("${this.target}") were made with other inputs when replayed`,
    );
    this.#reject(error);
    return undefined;
  }

  #handle(name: string): DatasetHandle {
    const map = this.#maps.get(name);
    if (!map) throw new TerminalError("nondeterministic_play", `the replayed play read map "${name}", which the run has not finished`);
    return {
      name,
      total: map.total,
      completed: map.completed,
      failed: map.failed,
      duplicatesDropped: map.duplicatesDropped,
      rows: ({ offset = 0, limit = 100 } = {}) => this.readRows(map, offset, limit),
    };
  }
}

function slot(effect: { kind: string; name: string; ordinal: number }): string {
  return `${effect.kind}:${effect.name}:${effect.ordinal}`;
}
