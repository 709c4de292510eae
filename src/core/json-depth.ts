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
 * `value` is within it. Iterative, one frame per level open (the walk's stack
 * is the path), and it looks no deeper than `maxDepth + 1` levels: a value
 * nested millions of levels deep, or an array of millions of items, costs no
 * memory per item.
 */
export function tooDeepAt(value: unknown, maxDepth = MAX_JSON_DEPTH): string[] | null {
  if (value === null || typeof value !== "object") return null;
  if (maxDepth <= 0) return [];
  const stack: Frame[] = [frameOf(value)];
  while (stack.length > 0) {
    const frame = stack[stack.length - 1]!;
    const item = nextItem(frame);
    if (item === DONE) {
      stack.pop();
      continue;
    }
    if (item === null || typeof item !== "object") continue;
    // `item` is one level below the containers open: past the limit once they are `maxDepth` of them.
    if (stack.length >= maxDepth) return pathOf(stack);
    stack.push(frameOf(item));
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

/** What {@link nextItem} answers once a container's items are all walked. */
const DONE: unique symbol = Symbol("done");

/** The container's next item (a hole of a sparse array is `undefined`), or DONE. */
function nextItem(frame: Frame): unknown {
  const size = frame.array ? frame.array.length : frame.keys!.length;
  if (frame.next >= size) return DONE;
  const at = frame.next++;
  return frame.array ? frame.array[at] : frame.object![frame.keys![at]!];
}

/** The path of the item each open container last gave, outermost first. */
function pathOf(stack: readonly Frame[]): string[] {
  return stack.map((f) => (f.keys ? f.keys[f.next - 1]! : String(f.next - 1)));
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
    const item = nextItem(frame);
    if (item === DONE) {
      stack.pop();
      continue;
    }
    if (typeof item === "number" && !Number.isFinite(item)) return pathOf(stack);
    if (item !== null && typeof item === "object") stack.push(frameOf(item));
  }
  return null;
}
