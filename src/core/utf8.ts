/** Byte-size checks for limits that count UTF-8 (SQLite values, stored rows, receipts). */

const encoder = new TextEncoder();

/** How many bytes `text` takes as UTF-8. */
export function utf8Bytes(text: string): number {
  return encoder.encode(text).length;
}

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
    const end = cutBefore(text, at, Math.min(text.length, at + maxChars));
    parts.push(text.slice(at, end));
    at = end;
  }
  return parts;
}

/**
 * Where to cut `text` at `end` (past `from`) without parting a character's two halves: one unit earlier when the
 * unit before `end` is a high surrogate whose low half follows (unless that would leave nothing after `from`).
 */
export function cutBefore(text: string, from: number, end: number): number {
  const last = text.charCodeAt(end - 1);
  return end < text.length && end - from > 1 && last >= 0xd800 && last <= 0xdbff ? end - 1 : end;
}
