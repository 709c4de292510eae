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
