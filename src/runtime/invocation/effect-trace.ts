/**
 * The play-level effects one invocation made, and how each settled: what an
 * executor replays to run the play up to a map and take its field functions
 * (src/runtime/executor/capture.ts). Kept in memory for the invocation only;
 * an executor of a later invocation asks that one.
 */
import { codeOf, messageOf } from "../../core/errors";
import { canonicalJson, fnv1a } from "../../core/hash";
import type { TracedEffect } from "../../contracts/executors";
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
        entry.outcome = { ok: false, code: codeOf(error) ?? null, message: messageOf(error) };
      },
    );
  }

  snapshot(): TracedEffect[] {
    return this.#effects.map((effect) => ({ ...effect }));
  }
}
