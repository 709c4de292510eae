/** Byte-size checks for limits that count UTF-8 (SQLite values, stored rows, receipts). */

const encoder = new TextEncoder();

/**
 * `text`'s UTF-8 length when it is past `limit` bytes, else null. A UTF-16
 * code unit is at most three bytes: only a long text is encoded to count.
 */
export function utf8BytesPast(text: string, limit: number): number | null {
  if (text.length * 3 <= limit) return null;
  const bytes = encoder.encode(text).length;
  return bytes > limit ? bytes : null;
}

/** A UTF-16 surrogate without its pair: UTF-8 (and storage) cannot hold it, and writes U+FFFD instead. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Whether `text` holds a lone surrogate (`"\ud800"` is valid JSON): stored, it would read back as another text. */
export function hasLoneSurrogate(text: string): boolean {
  return LONE_SURROGATE.test(text);
}
