import { describe, expect, it } from "vitest";
import { cutText } from "./errors";
import { hasLoneSurrogate, textParts, utf8BytesPast } from "./utf8";

describe("textParts", () => {
  it("cuts text into parts of at most maxChars that join back to it", () => {
    expect(textParts("", 4)).toEqual([""]);
    expect(textParts("abcdefghij", 4)).toEqual(["abcd", "efgh", "ij"]);
  });

  it("never cuts a character in two: each half would be stored as U+FFFD", () => {
    // The emoji's two halves fall on either side of the first cut.
    const parts = textParts("abc😀def", 4);
    expect(parts).toEqual(["abc", "😀de", "f"]);
    expect(parts.some(hasLoneSurrogate)).toBe(false);
    const long = "x😀".repeat(1000);
    for (const size of [1, 2, 3, 7, 64]) {
      const cut = textParts(long, size);
      expect(cut.join(""), `size ${size}`).toBe(long);
      expect(cut.every((part) => part.length <= size)).toBe(true);
      if (size > 1) expect(cut.some(hasLoneSurrogate), `size ${size}`).toBe(false);
    }
  });
});

describe("hasLoneSurrogate and utf8BytesPast", () => {
  it("finds a surrogate without its pair, not a pair", () => {
    expect(["\ud800", "a\udc00", "\udc00\ud800"].map(hasLoneSurrogate)).toEqual([true, true, true]);
    expect(["😀", "plain", ""].map(hasLoneSurrogate)).toEqual([false, false, false]);
  });

  it("counts UTF-8 bytes past a limit", () => {
    expect(utf8BytesPast("中".repeat(10), 29)).toBe(30);
    expect(utf8BytesPast("中".repeat(10), 30)).toBeNull();
  });
});

describe("cutText", () => {
  it("cuts to max characters and says how many more, never between a character's two halves", () => {
    expect(cutText("abcdef", 6)).toBe("abcdef");
    expect(cutText("abcdef", 4)).toBe("abcd… (2 characters more)");
    // The emoji's high half is the fourth unit: cut before it, not through it.
    expect(cutText("abc😀def", 4)).toBe("abc… (5 characters more)");
  });
});
