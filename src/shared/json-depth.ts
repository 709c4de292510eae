/**
 * How deeply JSON values may nest. SQLite's JSON functions refuse documents
 * nested past 1,000 levels and `JSON.stringify` recurses, so a value past a
 * small limit is refused where it enters (an HTTP body, a computed row)
 * instead of failing later in storage.
 */

/** The deepest nesting of objects and arrays a run's input, a signal's data or a stored row may have. */
export const MAX_JSON_DEPTH = 64;

/**
 * The path (`$.a.b[3]`) of the first value nested deeper than `maxDepth`
 * levels of objects and arrays, or null when `value` is within it. Iterative,
 * so a value nested thousands of levels deep cannot overflow the stack.
 */
export function tooDeepAt(value: unknown, maxDepth = MAX_JSON_DEPTH): string | null {
  const stack: Array<{ value: unknown; depth: number; path: string }> = [{ value, depth: 0, path: "$" }];
  while (stack.length > 0) {
    const { value: current, depth, path } = stack.pop()!;
    if (current === null || typeof current !== "object") continue;
    if (depth + 1 > maxDepth) return path;
    if (Array.isArray(current)) current.forEach((item, i) => stack.push({ value: item, depth: depth + 1, path: `${path}[${i}]` }));
    else for (const key of Object.keys(current)) stack.push({ value: (current as Record<string, unknown>)[key], depth: depth + 1, path: `${path}.${key}` });
  }
  return null;
}
