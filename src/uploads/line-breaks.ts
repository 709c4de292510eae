/**
 * Line numbers of a byte stream, as a CSV file counts them: CRLF, LF and a
 * lone CR each end a line (the record delimiters the CSV scanner accepts, so
 * a quoted line break counts like any other). Bytes are seen as they stream
 * past; `lineAt` is then asked for offsets in increasing order, and the
 * breaks behind the last offset asked for are dropped, so memory holds only
 * the breaks of the bytes seen but not yet asked about.
 */

const LF = 10;
const CR = 13;

export class LineBreaks {
  /** Offsets just past each break seen and not yet passed by `lineAt`, from `#head`. */
  #ends: number[] = [];
  #head = 0;
  /** The offset of the next byte to be seen. */
  #seen: number;
  /** A CR ended the bytes seen so far: whether it is a break of its own depends on the next byte. */
  #pendingCr = false;
  /** The line at the last offset asked for. */
  #line: number;
  #asked: number;

  /** Counting starts at byte `offset` of the file, which is on line `line`. */
  constructor(start: { offset: number; line: number } = { offset: 0, line: 1 }) {
    this.#seen = start.offset;
    this.#asked = start.offset;
    this.#line = start.line;
  }

  /** The next bytes of the stream. */
  see(bytes: Uint8Array): void {
    if (bytes.length === 0) return;
    const base = this.#seen;
    let from = 0;
    if (this.#pendingCr) {
      // CRLF ends its line after the LF; a CR followed by anything else ends it after the CR.
      const crlf = bytes[0] === LF;
      this.#ends.push(crlf ? base + 1 : base);
      if (crlf) from = 1;
      this.#pendingCr = false;
    }
    // The next LF and CR at or past `from`, each searched again only once passed: searching both on every line
    // scanned an LF-only file's chunk to its end for the CR it lacks, once per line.
    let lf = bytes.indexOf(LF, from);
    let cr = bytes.indexOf(CR, from);
    while (lf !== -1 || cr !== -1) {
      if (cr === -1 || (lf !== -1 && lf < cr)) {
        this.#ends.push(base + lf + 1);
        from = lf + 1;
      } else if (cr === bytes.length - 1) {
        this.#pendingCr = true;
        break;
      } else {
        const crlf = bytes[cr + 1] === LF;
        this.#ends.push(base + cr + (crlf ? 2 : 1));
        from = cr + (crlf ? 2 : 1);
      }
      if (lf !== -1 && lf < from) lf = bytes.indexOf(LF, from);
      if (cr !== -1 && cr < from) cr = bytes.indexOf(CR, from);
    }
    this.#seen = base + bytes.length;
  }

  /** Breaks seen that no offset asked for has passed yet (each held). */
  get pending(): number {
    return this.#ends.length - this.#head;
  }

  /** The stream ended: a CR at its very end ends a line. */
  end(): void {
    if (this.#pendingCr) this.#ends.push(this.#seen);
    this.#pendingCr = false;
  }

  /**
   * The 1-based line that the byte at `offset` is on (the line after the last
   * break ending at or before it). Offsets must not decrease from one call to
   * the next, nor pass the bytes seen.
   */
  lineAt(offset: number): number {
    if (offset < this.#asked) throw new Error(`LineBreaks.lineAt(${offset}) after lineAt(${this.#asked}): offsets must not decrease`);
    const ends = this.#ends;
    while (this.#head < ends.length && ends[this.#head]! <= offset) {
      this.#head++;
      this.#line++;
    }
    // Drop what is behind now and then, not on every call.
    if (this.#head > 1024 && this.#head * 2 > ends.length) {
      this.#ends = ends.slice(this.#head);
      this.#head = 0;
    }
    this.#asked = offset;
    return this.#line;
  }
}
