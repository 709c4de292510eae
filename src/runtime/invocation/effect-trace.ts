/**
 * The play-level effects one invocation made, and how each settled: what an
 * executor replays to run the play up to a map and take its field functions
 * (src/runtime/executor/capture.ts). Kept in memory for the invocation only;
 * an executor of a later invocation asks that one.
 */
import { codeOf, messageOf, TerminalError, TroupeError } from "../../core/errors";
import { ToolCallError } from "../../play/tool-error";
import { canonicalJson, fnv1a } from "../../core/hash";
import type { TracedEffect, TracedFailure, TracedResponse } from "../../contracts/executors";
import type { EffectCall } from "./effects";
import { NULL_BODY_STATUSES } from "./egress";

/** The code of an effect an executor cannot replay (a fetch's response past the bytes kept): the map then runs in the coordinator. */
export const UNREPLAYABLE = "unreplayable";

/**
 * Bytes of play-level fetch responses one invocation keeps for its executors'
 * replays (they travel with each capture source, under an RPC's 32 MiB): a
 * response past them is not replayable, and a map after it runs in the coordinator.
 */
export const MAX_TRACED_FETCH_BYTES = 4 * 1024 * 1024;

/**
 * What a fetch's identity in a trace is made of: its URL, method and body,
 * and a digest of its headers (they may carry secrets). Two POSTs of one
 * endpoint made at once are told apart by their bodies, whichever answered
 * first. A body that cannot be read as it is given (a stream, a form) makes
 * an identity no replay matches: a map after it runs in the coordinator.
 */
export function fetchIdentity(url: string | URL, init?: RequestInit): unknown {
  const headers = [...new Headers(init?.headers ?? undefined)].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return [String(url), (init?.method ?? "GET").toUpperCase(), bodyIdentity(init?.body), fnv1a(JSON.stringify(headers)).toString(16)];
}

function bodyIdentity(body: RequestInit["body"] | undefined): string | null {
  if (body === undefined || body === null) return null;
  if (typeof body === "string") return body;
  if (body instanceof URLSearchParams) return body.toString();
  if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) {
    const bytes = body instanceof ArrayBuffer ? new Uint8Array(body) : new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
    let text = "";
    for (const byte of bytes) text += String.fromCharCode(byte);
    return `bytes:${bytes.byteLength}:${fnv1a(text).toString(16)}`;
  }
  return `unreadable:${crypto.randomUUID()}`;
}

/** The response a replay of a traced fetch gets: the one the play got. */
export function replayedResponse(traced: TracedResponse): Response {
  return new Response(NULL_BODY_STATUSES.has(traced.status) ? null : traced.body.slice(), {
    status: traced.status,
    statusText: traced.statusText,
    headers: traced.headers,
  });
}

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
  /** The play-level fetch responses kept, by the response the play got. */
  #responses = new WeakMap<Response, TracedResponse>();
  #responseBytes = 0;

  /**
   * The response of a play-level fetch, kept (within {@link MAX_TRACED_FETCH_BYTES}) for the trace: the play gets a
   * copy, so that what it reads and what a replay reads are the same bytes.
   */
  async keep(response: Response): Promise<Response> {
    const body = new Uint8Array(await response.arrayBuffer());
    const traced: TracedResponse = { status: response.status, statusText: response.statusText, headers: [...response.headers], body };
    const copy = replayedResponse(traced);
    if (this.#responseBytes + body.byteLength <= MAX_TRACED_FETCH_BYTES) {
      this.#responseBytes += body.byteLength;
      this.#responses.set(copy, traced);
    }
    return copy;
  }

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
        const response = call.kind === "fetch" ? this.#responses.get(value as Response) : undefined;
        if (call.kind === "fetch" && !response) {
          const message = `its play-level fetch responses pass the ${MAX_TRACED_FETCH_BYTES / 1024 / 1024} MiB an invocation keeps for replays`;
          entry.outcome = { ok: false, code: UNREPLAYABLE, message };
        } else if (response || call.kind === "map") entry.outcome = { ok: true, value: response ?? null };
        else {
          // Copied as it came, before the play goes on: a play that changes an answer in place changes its own.
          try {
            entry.outcome = { ok: true, value: structuredClone(value) };
          } catch (error) {
            entry.outcome = { ok: false, code: UNREPLAYABLE, message: `its answer cannot be copied for a replay (${messageOf(error)})` };
          }
        }
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
