import { describe, expect, it } from "vitest";
import { LineBreaks } from "./line-breaks";

const bytes = (text: string) => new TextEncoder().encode(text);

/** The line of every byte offset of `text` (and the offset just past it), fed in chunks of `size`. */
function linesOf(text: string, size: number): number[] {
  const all = bytes(text);
  const breaks = new LineBreaks();
  for (let i = 0; i < all.length; i += size) breaks.see(all.subarray(i, i + size));
  breaks.end();
  return Array.from({ length: all.length + 1 }, (_, offset) => breaks.lineAt(offset));
}

describe("LineBreaks", () => {
  it("counts LF, CRLF and a lone CR as one break each, wherever chunks split them", () => {
    const text = "a\nb\r\nc\rd\r\r\ne";
    //            a \n b \r \n c \r d \r \r \n e
    const expected = [1, 1, 2, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6];
    for (const size of [1, 2, 3, 5, 100]) expect(linesOf(text, size), `chunks of ${size}`).toEqual(expected);
  });

  it("ends a line at a CR that ends the stream", () => {
    expect(linesOf("a\r", 1)).toEqual([1, 1, 2]);
  });

  it("starts from a given offset and line, and refuses to go back", () => {
    const breaks = new LineBreaks({ offset: 100, line: 7 });
    breaks.see(bytes("x\ny\n"));
    expect(breaks.lineAt(100)).toBe(7);
    expect(breaks.lineAt(102)).toBe(8);
    expect(breaks.lineAt(104)).toBe(9);
    expect(() => breaks.lineAt(101)).toThrow(/must not decrease/);
  });
});
