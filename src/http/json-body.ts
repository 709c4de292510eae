/** JSON request bodies: parsed, and refused when they nest deeper than the API accepts. */
import { ValidationError, messageOf } from "../core/errors";
import { tooDeepAt } from "../core/json-depth";

/**
 * How many levels of objects and arrays a run's `input` or a signal's `data`
 * may nest (`{}` is one level): well within what a stored row may hold
 * (`MAX_JSON_DEPTH` in src/core/json-depth.ts), so the fields a play adds
 * still fit; no real input needs more than a few levels.
 */
export const MAX_INPUT_DEPTH = 32;

/** The body's own object adds one level above `input` and `data`. */
const MAX_BODY_DEPTH = MAX_INPUT_DEPTH + 1;

/** Reads the request's body as JSON, or throws a 400 (not JSON, or nested too deeply). */
export async function readJsonBody(request: Request): Promise<unknown> {
  return parseJsonBody(await request.text());
}

/**
 * Parses a JSON body and checks its depth before anything else reads it.
 * `JSON.parse` itself does not recurse, so any depth parses; the check then
 * stops at {@link MAX_BODY_DEPTH} levels, so it cannot overflow the stack either.
 */
export function parseJsonBody(text: string): unknown {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new ValidationError(`the body is not valid JSON: ${messageOf(error)}`, [{ path: "(body)", message: "invalid JSON" }]);
  }
  const tooDeep = tooDeepAt(body, MAX_BODY_DEPTH);
  if (tooDeep) {
    const path = tooDeep.join(".") || "(body)";
    throw new ValidationError(`${path}: objects and arrays may nest at most ${MAX_INPUT_DEPTH} levels; flatten the value`, [
      { path, message: `nested deeper than ${MAX_INPUT_DEPTH} levels` },
    ]);
  }
  return body;
}
