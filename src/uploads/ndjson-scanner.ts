/**
 * NDJSON rows from a byte stream: one JSON object per line. A line ends with
 * LF (a CR before it is dropped); blank lines are skipped; a UTF-8 byte-order
 * mark at the file's start is skipped. A line that is not valid UTF-8, not
 * JSON, not an object, nested too deeply, too long, or holding a number past
 * a double's range (`1e400`), or giving a key twice in one object (JSON
 * keeps the last value, so a field's other value would be lost without a
 * word) fails the scan naming its line. Only the line
 * being read is held: a chunk's complete lines are parsed where they are,
 * and a partial line waits for the next chunk.
 */
import { hasUnkeepableField, UNKEEPABLE_FIELD_MESSAGE } from "../core/row-fields";
import { messageOf } from "../core/errors";
import { infiniteNumberAt, tooDeepAt } from "../core/json-depth";
import { repeatedKeyAt } from "../api/json-keys";
import type { Row } from "../play/types";
import { MalformedUploadError } from "./errors";
import { MAX_ROW_DEPTH, MAX_ROW_LINE_BYTES } from "./limits";
import { FILE_START, type FilePosition, type RowScanner, type ScanOptions } from "./scanning";

const LF = 10;
const CR = 13;
const BOM = [0xef, 0xbb, 0xbf];

export class NdjsonScanner implements RowScanner {
  #onRow: ScanOptions<Row>["onRow"];
  #decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
  /** The start of the line being read, and its bytes so far from earlier chunks. */
  #lineStart: FilePosition;
  #partial: Uint8Array[] = [];
  #partialBytes = 0;
  /** Just past the last row handed out, and its line: where the next row may be read from. */
  #resumeAt: FilePosition;
  #atFileStart: boolean;
  #refuseRepeatedKeys: boolean;

  /**
   * `refuseRepeatedKeys: false` (a run's range read of a file its upload scanned whole) takes a key given twice as
   * `JSON.parse` does, the last value: an upload stored before such lines were refused is read as it was then.
   */
  constructor(options: ScanOptions<Row> & { refuseRepeatedKeys?: boolean }) {
    const start = options.start ?? FILE_START;
    this.#onRow = options.onRow;
    this.#refuseRepeatedKeys = options.refuseRepeatedKeys ?? true;
    this.#lineStart = { ...start };
    this.#resumeAt = { ...start };
    this.#atFileStart = start.offset === 0;
  }

  async write(bytes: Uint8Array): Promise<void> {
    let from = 0;
    for (;;) {
      const lf = bytes.indexOf(LF, from);
      if (lf === -1) break;
      this.#line(this.#join(bytes.subarray(from, lf)), 1);
      from = lf + 1;
    }
    const rest = bytes.subarray(from);
    if (rest.length === 0) return;
    if (this.#partialBytes + rest.length > this.#maxLineBytes()) throw this.#tooLong();
    // Copied: the caller may reuse its chunk's memory once this returns.
    this.#partial.push(rest.slice());
    this.#partialBytes += rest.length;
  }

  async close(): Promise<void> {
    if (this.#partialBytes > 0) this.#line(this.#join(new Uint8Array(0)), 0);
  }

  /** The line's bytes: what earlier chunks held of it, then `tail`. */
  #join(tail: Uint8Array): Uint8Array {
    if (this.#partialBytes === 0) return tail;
    if (this.#partialBytes + tail.length > this.#maxLineBytes()) throw this.#tooLong();
    const line = new Uint8Array(this.#partialBytes + tail.length);
    let at = 0;
    for (const part of [...this.#partial, tail]) {
      line.set(part, at);
      at += part.length;
    }
    this.#partial = [];
    this.#partialBytes = 0;
    return line;
  }

  /** One whole line (without its LF), then the `ending` bytes after it (1 for the LF, 0 at the end of the file). */
  #line(content: Uint8Array, ending: number): void {
    const start = this.#lineStart;
    const end = start.offset + content.length + ending;
    this.#lineStart = { offset: end, line: start.line + 1 };
    let bytes = content;
    if (this.#atFileStart) {
      this.#atFileStart = false;
      if (BOM.every((b, i) => bytes[i] === b)) bytes = bytes.subarray(BOM.length);
    }
    if (bytes.at(-1) === CR) bytes = bytes.subarray(0, -1);
    if (bytes.length > MAX_ROW_LINE_BYTES) throw this.#tooLong(start.line);
    const row = parseRow(bytes, this.#decoder, start.line, this.#refuseRepeatedKeys);
    if (row === null) return;
    this.#onRow(row, { line: start.line, resumeAt: this.#resumeAt, end });
    this.#resumeAt = { offset: end, line: start.line + 1 };
  }

  /**
   * The most bytes the line being read may hold with what `#line` strips before it measures the line: a CR
   * before its LF, and on the file's first line a byte-order mark. A line is measured without them however
   * its bytes arrive.
   */
  #maxLineBytes(): number {
    return MAX_ROW_LINE_BYTES + 1 + (this.#atFileStart ? BOM.length : 0);
  }

  #tooLong(line = this.#lineStart.line): MalformedUploadError {
    return new MalformedUploadError(line, `this line is longer than ${MAX_ROW_LINE_BYTES} bytes, the most one row may hold`);
  }
}

/** The row a line holds, or null for a blank line. */
function parseRow(bytes: Uint8Array, decoder: TextDecoder, line: number, refuseRepeatedKeys: boolean): Row | null {
  let text: string;
  try {
    text = decoder.decode(bytes);
  } catch {
    // The decoder's message says nothing the line number does not.
    throw new MalformedUploadError(line, "this line is not valid UTF-8; save the file as UTF-8");
  }
  if (text.trim() === "") return null;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new MalformedUploadError(line, `this line is not valid JSON (${messageOf(error)})`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    const kind = value === null ? "null" : Array.isArray(value) ? "an array" : `a ${typeof value}`;
    throw new MalformedUploadError(line, `each line must be a JSON object; this one is ${kind}`);
  }
  if (hasUnkeepableField(value)) throw new MalformedUploadError(line, UNKEEPABLE_FIELD_MESSAGE);
  const tooDeep = tooDeepAt(value, MAX_ROW_DEPTH);
  if (tooDeep) throw new MalformedUploadError(line, `${tooDeep.join(".")}: objects and arrays may nest at most ${MAX_ROW_DEPTH} levels`);
  const infinite = infiniteNumberAt(text, value);
  if (infinite)
    throw new MalformedUploadError(
      line,
      `${infinite.join(".")}: a number past what a JSON number holds (about 1.8e308); write it as a string`,
    );
  const repeated = refuseRepeatedKeys ? repeatedKeyAt(text) : null;
  if (repeated) {
    const where = repeated.path.length ? ` of ${repeated.path.join(".")}` : "";
    throw new MalformedUploadError(
      line,
      `the field ${JSON.stringify(repeated.key)}${where} is given twice in one object (JSON keeps only the last value); give each field once`,
    );
  }
  return value as Row;
}
