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
