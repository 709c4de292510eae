/**
 * What the row scanners share: a scanner takes a file's bytes as they stream
 * past and hands each row, with its place in the file, to `onRow`. It may
 * start at the file's first byte or at any row boundary it was told the line
 * of, which is how a range of rows is read without the rows before it.
 */

/** A byte offset of the file and the 1-based line that byte is on. */
export interface FilePosition {
  offset: number;
  line: number;
}

/** The file's first byte. */
export const FILE_START: FilePosition = { offset: 0, line: 1 };

/** Where one row is in its file. */
export interface RowPlace {
  /** The line of the file the row starts on (after any blank lines before it). */
  line: number;
  /**
   * Where a scan may start to read this row next: just past the row before
   * it (blank lines between them included), or where this scan started.
   */
  resumeAt: FilePosition;
  /** The offset just past the row and its line break. */
  end: number;
}

export interface ScanOptions<Value> {
  /** Each row in file order. A throw here fails the scan with that error. */
  onRow(value: Value, place: RowPlace): void;
  /** Where the bytes written start; the file's first byte by default (where a UTF-8 byte-order mark is skipped). */
  start?: FilePosition;
}

/** Bytes in, rows out to `onRow`; a malformed row rejects `write` or `close` with a `MalformedUploadError`. */
export interface RowScanner {
  /** The next bytes of the file; resolves once every row they complete has gone to `onRow`. */
  write(bytes: Uint8Array): Promise<void>;
  /** The file ended: its last row (without a line break) goes to `onRow`. */
  close(): Promise<void>;
}
