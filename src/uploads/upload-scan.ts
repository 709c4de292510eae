/**
 * One pass over an uploaded file as it streams in: checks that it is what
 * its format says, counts its rows and bytes, builds its index and hashes its
 * bytes (SHA-256: two uploads of one file are one run's input to an
 * Idempotency-Key). Holds the columns and the index, never the rows.
 */
import { headerProblem, isUnnamedColumn } from "../core/row-fields";
import { utf8Bytes } from "../core/utf8";
import type { Row } from "../play/types";
import { MalformedUploadError, UploadTooLargeError } from "./errors";
import { CsvScanner } from "./csv-scanner";
import {
  INDEX_EVERY_ROWS,
  MAX_COLUMN_NAMES_CHARS,
  MAX_COLUMNS,
  MAX_INDEX_POSITIONS,
  MAX_JSON_GROWTH,
  MAX_ROW_JSON_BYTES,
  MAX_UPLOAD_ROWS,
  type UploadFormat,
} from "./limits";
import { NdjsonScanner } from "./ndjson-scanner";
import { rowOf } from "./range-reader";
import type { FilePosition, RowPlace, RowScanner } from "./scanning";
import type { UploadIndex } from "./upload-index";

export class UploadScan {
  #format: UploadFormat;
  #every: number;
  #maxPositions: number;
  #scanner: RowScanner;
  #columns: string[] | null = null;
  #headerLine = 0;
  /** CSV: what the header's names add to each row as JSON (`{"id":"","name":""}` less the values). */
  #namesJsonBytes = 0;
  /** NDJSON: every field name seen so far. */
  #seenColumns = new Set<string>();
  /** The characters of {@link #seenColumns} together. */
  #seenColumnsChars = 0;
  #rows = 0;
  #bytes = 0;
  #positions: FilePosition[] = [];
  /** The first bytes, until there are enough to tell a UTF-16 file. */
  #head: number[] = [];
  #digest = new crypto.DigestStream("SHA-256");
  #hashing = this.#digest.getWriter();

  /**
   * `every`: rows between two indexed positions to start with; `maxPositions`: the most the index keeps, past
   * which `every` doubles (tests use small ones).
   */
  constructor(options: { format: UploadFormat; every?: number; maxPositions?: number }) {
    const { format, every = INDEX_EVERY_ROWS, maxPositions = MAX_INDEX_POSITIONS } = options;
    this.#format = format;
    this.#every = every;
    this.#maxPositions = Math.max(1, maxPositions);
    this.#scanner =
      format === "csv"
        ? new CsvScanner({ onRow: (fields, place) => this.#csvRow(fields, place) })
        : new NdjsonScanner({ onRow: (row, place) => this.#ndjsonRow(row, place) });
  }

  /** The file's next bytes; rejects with a `MalformedUploadError` or `UploadTooLargeError` as soon as one is found. */
  async write(bytes: Uint8Array): Promise<void> {
    if (this.#head.length < 2) this.#refuseUtf16(bytes);
    this.#bytes += bytes.length;
    // A copy: the caller sends these same bytes on to storage.
    await this.#hashing.write(bytes.slice());
    await this.#scanner.write(bytes);
  }

  /** The file ended: its index, or the error that makes it unusable. */
  async finish(): Promise<UploadIndex> {
    await this.#scanner.close();
    if (this.#format === "csv" && this.#columns === null) {
      throw new MalformedUploadError(1, "the file is empty: a CSV upload starts with a header line naming its columns");
    }
    await this.#hashing.close();
    const sha256 = Array.from(new Uint8Array(await this.#digest.digest), (b) => b.toString(16).padStart(2, "0")).join("");
    return {
      format: this.#format,
      columns: this.#columns ?? [...this.#seenColumns],
      rows: this.#rows,
      bytes: this.#bytes,
      sha256,
      every: this.#every,
      positions: this.#positions,
    };
  }

  #refuseUtf16(bytes: Uint8Array): void {
    for (const byte of bytes.subarray(0, 2 - this.#head.length)) this.#head.push(byte);
    const [first, second] = this.#head;
    if ((first === 0xff && second === 0xfe) || (first === 0xfe && second === 0xff)) {
      throw new MalformedUploadError(1, "the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8");
    }
  }

  #csvRow(fields: string[], place: RowPlace): void {
    if (this.#columns === null) {
      this.#header(fields, place.line);
      return;
    }
    if (fields.length !== this.#columns.length) {
      throw new MalformedUploadError(
        place.line,
        `this row has ${fields.length} field${fields.length === 1 ? "" : "s"}, the header (line ${this.#headerLine}) has ${this.#columns.length} columns`,
      );
    }
    const columns = this.#columns;
    this.#refuseLargeAsJson(place, this.#namesJsonBytes, () => rowOf(columns, fields));
    this.#row(place);
  }

  #header(fields: string[], line: number): void {
    if (fields.length > MAX_COLUMNS)
      throw new MalformedUploadError(line, `the header has ${fields.length} columns, at most ${MAX_COLUMNS} are allowed`);
    const problem = headerProblem(fields);
    if (problem !== null) throw new MalformedUploadError(line, problem);
    this.#columns = fields;
    this.#headerLine = line;
    const named = fields.filter((column) => !isUnnamedColumn(column));
    // Braces, and for each field its name, a colon, its value's quotes, and a comma between two.
    this.#namesJsonBytes = 2 + named.reduce((sum, column) => sum + utf8Bytes(JSON.stringify(column)) + 4, 0) - Math.min(named.length, 1);
  }

  /**
   * Refuses a row past {@link MAX_ROW_JSON_BYTES} as JSON, as a run's rows in hand are refused: it would fail at run
   * time, or pass as an upload's row where it is refused in hand. Only a row whose written bytes (`place`) could
   * reach it is written out as JSON to be measured; `fixedBytes` is what the row's JSON holds besides its values.
   */
  #refuseLargeAsJson(place: RowPlace, fixedBytes: number, row: () => Row): void {
    if (fixedBytes + MAX_JSON_GROWTH * (place.end - place.resumeAt.offset) <= MAX_ROW_JSON_BYTES) return;
    const bytes = utf8Bytes(JSON.stringify(row()));
    if (bytes > MAX_ROW_JSON_BYTES) {
      throw new MalformedUploadError(
        place.line,
        `this row is ${bytes} bytes as JSON, as a run holds it (a control character is six bytes there, \\u0001), over ${MAX_ROW_JSON_BYTES}, the most one row may hold`,
      );
    }
  }

  #ndjsonRow(row: Record<string, unknown>, place: RowPlace): void {
    for (const key of Object.keys(row)) {
      if (this.#seenColumns.has(key)) continue;
      if (this.#seenColumns.size >= MAX_COLUMNS) {
        throw new MalformedUploadError(
          place.line,
          `this row brings the file past ${MAX_COLUMNS} distinct field names, the most an upload may have`,
        );
      }
      if (this.#seenColumnsChars + key.length > MAX_COLUMN_NAMES_CHARS) {
        throw new MalformedUploadError(
          place.line,
          `this row brings the file's distinct field names past ${MAX_COLUMN_NAMES_CHARS} characters together, the most an upload may have`,
        );
      }
      this.#seenColumns.add(key);
      this.#seenColumnsChars += key.length;
    }
    this.#refuseLargeAsJson(place, 0, () => row);
    this.#row(place);
  }

  #row(place: RowPlace): void {
    if (this.#rows >= MAX_UPLOAD_ROWS) {
      throw new UploadTooLargeError(`the file has more than ${MAX_UPLOAD_ROWS} rows (line ${place.line}), the most one upload may hold`, {
        maxRows: MAX_UPLOAD_ROWS,
      });
    }
    if (this.#rows % this.#every === 0) {
      if (this.#positions.length === this.#maxPositions) {
        // Full: keep the positions of rows 0, 2·every, 4·every, ... and index every 2·every-th row from here.
        this.#positions = this.#positions.filter((_, i) => i % 2 === 0);
        this.#every *= 2;
      }
      if (this.#rows % this.#every === 0) this.#positions.push(place.resumeAt);
    }
    this.#rows++;
  }
}
