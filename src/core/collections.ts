/** The value under `key`, first stored from `make()` when there is none. */
export function getOrInsert<K, V>(map: Map<K, V>, key: K, make: () => V): V;
export function getOrInsert<K extends WeakKey, V>(map: WeakMap<K, V>, key: K, make: () => V): V;
export function getOrInsert<K extends WeakKey, V>(map: Map<K, V> | WeakMap<K, V>, key: K, make: () => V): V {
  let value = map.get(key);
  if (value === undefined) {
    value = make();
    map.set(key, value);
  }
  return value;
}

/** Runs `fn` over `items`, at most `limit` at once, in order of starting; `fn` hears each item's index. */
export async function forEachLimited<T>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const index = next++;
        await fn(items[index]!, index);
      }
    }),
  );
}

/**
 * Consecutive pages of `items` of at most `maxChars` by `sizeOf` (an item past it is a page of its own), and at
 * most `maxItems` each.
 */
export function inSizedPages<T>(items: readonly T[], maxChars: number, sizeOf: (item: T) => number, maxItems = Infinity): T[][] {
  const pages: T[][] = [];
  let page: T[] = [];
  let chars = 0;
  for (const item of items) {
    const size = sizeOf(item);
    if (page.length > 0 && (chars + size > maxChars || page.length >= maxItems)) {
      pages.push(page);
      page = [];
      chars = 0;
    }
    page.push(item);
    chars += size;
  }
  if (page.length > 0) pages.push(page);
  return pages;
}
