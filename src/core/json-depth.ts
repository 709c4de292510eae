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
 * without one, `text` parses to finite numbers only and is not walked. A run of
 * digits is tried from its first only (`\d{100}` alone would be tried again
 * from each of its digits: seconds on a 16 MiB body of long numbers).
 */
const MAY_OVERFLOW = /[eE]\+?\d{3}|(?:^|\D)\d{100}/;

/** A container being walked, and the next of its items. */
interface Frame {
  array: readonly unknown[] | null;
  object: Record<string, unknown> | null;
  keys: string[] | null;
  next: number;
}

function frameOf(container: object): Frame {
  return Array.isArray(container)
    ? { array: container, object: null, keys: null, next: 0 }
    : { array: null, object: container as Record<string, unknown>, keys: Object.keys(container), next: 0 };
}

/**
 * The path of the first number in `value` (parsed from `text`) that is
 * ±Infinity, or null. `JSON.parse` reads a literal past a double's range
 * (`1e400`) as Infinity, which `JSON.stringify` writes as `null`: stored, the
 * value would read back as another. Iterative, one frame per level open (the
 * walk's stack is the path): a body of millions of items costs no memory per
 * item.
 */
export function infiniteNumberAt(text: string, value: unknown): string[] | null {
  if (!MAY_OVERFLOW.test(text)) return null;
  if (typeof value === "number") return Number.isFinite(value) ? null : [];
  if (value === null || typeof value !== "object") return null;
  const stack: Frame[] = [frameOf(value)];
  while (stack.length > 0) {
    const frame = stack[stack.length - 1]!;
    const size = frame.array ? frame.array.length : frame.keys!.length;
    if (frame.next >= size) {
      stack.pop();
      continue;
    }
    const at = frame.next++;
    const item = frame.array ? frame.array[at] : frame.object![frame.keys![at]!];
    if (typeof item === "number" && !Number.isFinite(item)) return stack.map((f) => (f.keys ? f.keys[f.next - 1]! : String(f.next - 1)));
    if (item !== null && typeof item === "object") stack.push(frameOf(item));
  }
  return null;
}
