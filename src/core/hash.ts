/** Stable hashing and canonical JSON, shared by row keys, receipt keys and shard routing. */

/**
 * JSON with object keys sorted at every level, so equal values hash equally.
 * A value with `toJSON` is written as JSON.stringify writes it (a `Date` as
 * its ISO string); any other object that is not plain (a `Map`, a `Set`, a
 * class instance) throws, where JSON would write `{}` and give different
 * values one key (a tool input parsed with `z.coerce.date()`, say).
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  let itself = false;
  if (value && typeof value === "object" && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    const json = (value as { toJSON(): unknown }).toJSON();
    if (json !== value) return sortKeys(json);
    // A toJSON that returns its own object: written by its own keys, as JSON.stringify writes it.
    itself = true;
  }
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value && typeof value === "object") {
    const prototype = Object.getPrototypeOf(value);
    // A typed array keeps the form it always had, its elements by index (JSON.stringify writes the same).
    const typedArray = ArrayBuffer.isView(value) && !(value instanceof DataView);
    if (prototype !== Object.prototype && prototype !== null && !typedArray && !itself)
      throw new TypeError(
        `${prototype?.constructor?.name ?? "this object"} is not JSON: give plain objects, arrays, strings, numbers, booleans or null`,
      );
    // No prototype: a key `__proto__` (JSON.parse makes it an own key) is a key like any other, not the object's
    // prototype, which JSON.stringify would leave out (`{"__proto__":{"a":1}}` was written `{}`).
    const out: Record<string, unknown> = Object.create(null);
    for (const key of Object.keys(value).sort()) {
      const v = (value as Record<string, unknown>)[key];
      if (v !== undefined) out[key] = sortKeys(v);
    }
    return out;
  }
  return value;
}

/** SHA-256 hex digest of a string. */
export async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** FNV-1a 32-bit: a fast, stable hash used only to route keys to shards. */
export function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

/** The shard a key belongs to, out of `shardCount`; stable for the key's lifetime. */
export function shardOf(key: string, shardCount: number): number {
  return fnv1a(key) % shardCount;
}
