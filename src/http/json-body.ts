/** JSON request bodies: parsed, and refused when they nest deeper than the API accepts. */
import { ValidationError, messageOf } from "../core/errors";
import { infiniteNumberAt, tooDeepAt } from "../core/json-depth";
import { repeatedKeyAt } from "../api/json-keys";

/**
 * How many levels of objects and arrays a run's `input` or a signal's `data`
 * may nest (`{}` is one level): well within what a stored row may hold
 * (`MAX_JSON_DEPTH` in src/core/json-depth.ts), so the fields a play adds
 * still fit; no real input needs more than a few levels.
 */
export const MAX_INPUT_DEPTH = 32;

/** The body's own object adds one level above `input` and `data`. */
const MAX_BODY_DEPTH = MAX_INPUT_DEPTH + 1;

/**
 * Reads the request's body as JSON, or throws a 400 (not JSON, nested too deeply, a number past a double's range, or a
 * key given twice in one object).
 */
export async function readJsonBody(request: Request): Promise<unknown> {
  return parseJsonBody(await request.text());
}

/**
 * Parses a JSON body and checks its depth, that its numbers are finite, and
 * that no object gives a key twice (`JSON.parse` keeps the last value, so a
 * row's field would lose the other without a word), before anything else
 * reads it.
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
  const infinite = infiniteNumberAt(text, body);
  if (infinite) {
    const path = infinite.join(".") || "(body)";
    throw new ValidationError(
      `${path}: a number past what a JSON number holds (about 1.8e308) would be stored as null; send it as a string`,
      [{ path, message: "a number past ±1.8e308" }],
    );
  }
  const repeated = repeatedKeyAt(text);
  if (repeated) {
    const path = [...repeated.path, repeated.key].join(".");
    throw new ValidationError(
      `${path}: the key ${JSON.stringify(repeated.key)} is given twice in one object (JSON keeps only the last value); send each key once`,
      [{ path, message: "a key given twice in one object" }],
    );
  }
  return body;
}
