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

/**
 * `text` cut into consecutive parts of at most `maxChars` UTF-16 units (one part, empty, for empty text), never
 * between the two halves of a character: each half alone is a lone surrogate, which storage writes as U+FFFD.
 */
export function textParts(text: string, maxChars: number): string[] {
  const parts: string[] = [];
  for (let at = 0; at < text.length || parts.length === 0; ) {
    let end = Math.min(text.length, at + maxChars);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && end - at > 1 && last >= 0xd800 && last <= 0xdbff) end--;
    parts.push(text.slice(at, end));
    at = end;
  }
  return parts;
}
