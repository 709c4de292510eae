/**
 * Keys a JSON text gives twice in one object. `JSON.parse` keeps the last of
 * them without a word (`{"id":"1","id":"2"}` is `{ id: "2" }`), so a row sent
 * with a field twice would be stored with one of its values lost. The text is
 * walked once, after `JSON.parse` accepted it, holding the keys of each
 * object open (so at most one set per level of nesting).
 */

/** A key given twice in one object: the path of that object (keys and array indexes, outermost first), and the key. */
export interface RepeatedKey {
  path: string[];
  key: string;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const COMMA = 0x2c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

/** An object open in the walk (its keys so far, the last one) or an array (the index of its current item). */
type Open = { keys: Keys; key: string } | { keys: null; index: number };

/** Past this many keys an object's keys are a set; below, a list is cheaper (most objects hold a few keys). */
const LIST_KEYS = 16;

/** The keys of one object so far. */
class Keys {
  #list: string[] = [];
  #set: Set<string> | null = null;

  /** Adds `key`; false when the object already gave it. */
  add(key: string): boolean {
    if (this.#set) {
      if (this.#set.has(key)) return false;
      this.#set.add(key);
      return true;
    }
    if (this.#list.includes(key)) return false;
    this.#list.push(key);
    if (this.#list.length > LIST_KEYS) this.#set = new Set(this.#list);
    return true;
  }
}

/**
 * The first key `text` gives twice in one object, or null. `text` must be
 * valid JSON (`JSON.parse` accepted it): the walk does not check its grammar.
 * Keys are compared as parsed (`"a"` and `"\u0061"` are one key).
 *
 * @example repeatedKeyAt('{"rows":[{"id":"1","id":"2"}]}') // { path: ["rows", "0"], key: "id" }
 */
export function repeatedKeyAt(text: string): RepeatedKey | null {
  const open: Open[] = [];
  const length = text.length;
  let i = 0;
  while (i < length) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const end = stringEnd(text, i);
      let next = end + 1;
      while (next < length && isSpace(text.charCodeAt(next))) next++;
      const top = open.at(-1);
      if (text.charCodeAt(next) === COLON && top?.keys) {
        const raw = text.slice(i + 1, end);
        const key: string = raw.includes("\\") ? JSON.parse(text.slice(i, end + 1)) : raw;
        if (!top.keys.add(key)) return { path: pathOf(open), key };
        top.key = key;
        i = next + 1;
        continue;
      }
      i = end + 1;
      continue;
    }
    if (c === OPEN_OBJECT) open.push({ keys: new Keys(), key: "" });
    else if (c === OPEN_ARRAY) open.push({ keys: null, index: 0 });
    else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) open.pop();
    else if (c === COMMA) {
      const top = open.at(-1);
      if (top && !top.keys) top.index++;
    }
    i++;
  }
  return null;
}

/** The index of the quote closing the string that opens at `start`. */
function stringEnd(text: string, start: number): number {
  let end = text.indexOf('"', start + 1);
  for (;;) {
    let backslashes = 0;
    while (text.charCodeAt(end - 1 - backslashes) === BACKSLASH) backslashes++;
    // An odd run of backslashes escapes the quote.
    if (backslashes % 2 === 0) return end;
    end = text.indexOf('"', end + 1);
  }
}

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/** The path to the innermost open object: each open container's current key or index but the last's. */
function pathOf(open: readonly Open[]): string[] {
  return open.slice(0, -1).map((o) => (o.keys ? o.key : String(o.index)));
}
