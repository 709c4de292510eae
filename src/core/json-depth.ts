/**
 * How deeply JSON values may nest. SQLite's JSON functions refuse documents
 * nested past 1,000 levels and `JSON.stringify` recurses, so a value past a
 * small limit is refused where it enters (an HTTP body, a computed row)
 * instead of failing later in storage.
 */

/** The deepest nesting of objects and arrays a run's input, a signal's data or a stored row may have. */
export const MAX_JSON_DEPTH = 64;

/**
 * The path (keys and array indexes, outermost first) of the first object or
 * array nested deeper than `maxDepth` levels (`{}` is one), or null when
 * `value` is within it. Iterative, and it looks no deeper than `maxDepth + 1`
 * levels, so a value nested millions of levels deep costs nothing more.
 */
export function tooDeepAt(value: unknown, maxDepth = MAX_JSON_DEPTH): string[] | null {
  const stack: Array<{ value: unknown; path: string[] }> = [{ value, path: [] }];
  while (stack.length > 0) {
    const { value: current, path } = stack.pop()!;
    if (current === null || typeof current !== "object") continue;
    if (path.length >= maxDepth) return path;
    const entries = Array.isArray(current) ? current.map((item, i) => [String(i), item] as const) : Object.entries(current);
    for (let i = entries.length - 1; i >= 0; i--) stack.push({ value: entries[i]![1], path: [...path, entries[i]![0]] });
  }
  return null;
}

/**
 * Only a number literal with a three-digit exponent or a hundred digits in a
 * row can be past a double's ±1.8e308 (99 digits and `e99` are at most 1e198):
 * without one, `text` parses to finite numbers only and is not walked.
 */
const MAY_OVERFLOW = /[eE]\+?\d{3}|\d{100}/;

/**
 * The path of the first number in `value` (parsed from `text`) that is
 * ±Infinity, or null. `JSON.parse` reads a literal past a double's range
 * (`1e400`) as Infinity, which `JSON.stringify` writes as `null`: stored, the
 * value would read back as another. Iterative, like {@link tooDeepAt}.
 */
export function infiniteNumberAt(text: string, value: unknown): string[] | null {
  if (!MAY_OVERFLOW.test(text)) return null;
  const stack: Array<{ value: unknown; path: string[] }> = [{ value, path: [] }];
  while (stack.length > 0) {
    const { value: current, path } = stack.pop()!;
    if (typeof current === "number" && !Number.isFinite(current)) return path;
    if (current === null || typeof current !== "object") continue;
    const entries = Array.isArray(current) ? current.map((item, i) => [String(i), item] as const) : Object.entries(current);
    for (let i = entries.length - 1; i >= 0; i--) stack.push({ value: entries[i]![1], path: [...path, entries[i]![0]] });
  }
  return null;
}
