/**
 * The play-level effects one invocation made, and how each settled: what an
 * executor replays to run the play up to a map and take its field functions
 * (src/runtime/executor/capture.ts). Kept in memory for the invocation only;
 * an executor of a later invocation asks that one.
 */
import { codeOf, messageOf, TerminalError, TroupeError } from "../../core/errors";
import { ToolCallError } from "../../play/tool-error";
import { canonicalJson, fnv1a } from "../../core/hash";
import type { TracedEffect, TracedFailure } from "../../contracts/executors";
import type { EffectCall } from "./effects";

/** The code of an effect an executor cannot replay (a fetch's response): the map then runs in the coordinator. */
export const UNREPLAYABLE = "unreplayable";

/**
 * What a call was made with, as a trace compares it: its canonical JSON, or
 * past 256 characters its length and hash (null when it is not JSON).
 */
export function callIdentity(value: unknown): string | null {
  let json: string;
  try {
    json = canonicalJson(value);
  } catch {
    return null;
  }
  return json.length <= 256 ? json : `${json.length}:${fnv1a(json).toString(16)}`;
}

export class EffectTrace {
  #effects: TracedEffect[] = [];

  /**
   * Records the effect `call` (made with `input`, see {@link callIdentity}) and, once it settles, its outcome (a map's
   * handle is rebuilt from its record).
   */
  record(call: EffectCall, result: unknown, input: string | null = null): void {
    if (call.kind === "log") return;
    const entry: TracedEffect = { kind: call.kind, name: call.name, ordinal: call.ordinal, input, outcome: null };
    this.#effects.push(entry);
    if (!(result instanceof Promise)) return;
    result.then(
      (value: unknown) => {
        if (call.kind === "fetch") entry.outcome = { ok: false, code: UNREPLAYABLE, message: "a fetch's response cannot be replayed" };
        else entry.outcome = { ok: true, value: call.kind === "map" ? null : value };
      },
      (error: unknown) => {
        entry.outcome = { ok: false, code: codeOf(error) ?? null, message: messageOf(error), ...kindOf(error) };
      },
    );
  }

  snapshot(): TracedEffect[] {
    return this.#effects.map((effect) => ({ ...effect }));
  }
}

/** What a play may test of a failed effect's error, for a replay to throw the same (see {@link TracedFailure}). */
function kindOf(error: unknown): Partial<TracedFailure> {
  if (error instanceof ToolCallError)
    return { as: "tool", retryable: error.retryable, status: error.status, retryAfterMs: error.retryAfterMs };
  if (error instanceof TerminalError) return { as: "terminal" };
  return {};
}

/** The error a traced failure was, as a replay throws it. */
export function tracedError(failure: TracedFailure): TroupeError {
  const code = failure.code ?? "effect_failed";
  if (failure.as === "tool")
    return new ToolCallError({
      code,
      message: failure.message,
      retryable: failure.retryable ?? false,
      status: failure.status ?? null,
      retryAfterMs: failure.retryAfterMs ?? null,
    });
  if (failure.as === "terminal") return new TerminalError(code, failure.message);
  return new TroupeError(code, failure.message);
}
