/**
 * CSV rows from a byte stream, through csv-parse's streaming parser (RFC 4180:
 * quoted fields with delimiters, doubled quotes and line breaks). Each record
 * reaches `onRow` synchronously inside the parser (its `on_record` hook), so
 * nothing queues behind it: memory holds one chunk and one partial record.
 * Rows are arrays of fields; the header is a row like any other (the caller
 * knows which row is the header).
 *
 * Lines: CRLF, LF and a lone CR end a record outside quotes, and the line
 * count counts the same three inside quotes too. Blank lines are skipped. A
 * record's end offset is the parser's own byte count (`info.bytes`), so row
 * boundaries are exactly where the parser's records end, quoted line breaks
 * and multi-byte characters included.
 *
 * A record is refused past MAX_ROW_LINE_BYTES of field characters (the
 * parser's `max_record_size`), and past MAX_CSV_RECORD_BYTES as written,
 * which the parser does not count: the bytes go to it in pieces, and the
 * record being read is measured after each.
 */
import { CsvError, parse } from "csv-parse/stream";
import { MalformedUploadError } from "./errors";
import { LineBreaks } from "./line-breaks";
import { MAX_CSV_RECORD_BYTES, MAX_ROW_LINE_BYTES } from "./limits";
import { FILE_START, type RowScanner, type ScanOptions } from "./scanning";

/**
 * The most line breaks held past the last row: a row's own (quoted) breaks
 * are bounded by its size, so only blank lines add up past this, and the
 * line count holds each one's offset until the next row (a file of line
 * feeds would fill the isolate).
 */
export const MAX_PENDING_BREAKS = 1_000_000;

/** The most bytes the parser is given at once: a record is refused at most this far past MAX_CSV_RECORD_BYTES. */
const PIECE_BYTES = 16 * 1024;
/**
 * The most bytes at the end of a piece the parser holds back for a delimiter's lookahead: the row it hands out
 * with the next piece may end among them.
 */
const LOOKAHEAD_BYTES = 3;
const LF = 10;
const CR = 13;

export class CsvScanner implements RowScanner {
  #breaks: LineBreaks;
  #writer: WritableStreamDefaultWriter<Uint8Array>;
  /**
   * Settles when the parser is done: rejected with the error that stopped it.
   * The parser's readable side is where a TransformStream keeps its error (its
   * writable side may accept writes and even a close after a failed flush).
   */
  #done: Promise<void>;
  /** Just past the last row handed out: where the next row's bytes start (blank lines included). */
  #boundary: number;
  /** Blank lines the parser had skipped when it handed out the last row. */
  #blankLines = 0;
  /** Just past the bytes given to the parser, and a copy of the last LOOKAHEAD_BYTES of them. */
  #written: number;
  #tail = new Uint8Array(0);
  /**
   * The first byte of the row being read, past the last row and the blank lines after it (they hold only line
   * breaks); null until one comes. Found from `#rowFrom`, the boundary it was looked for from.
   */
  #rowStart: number | null = null;
  #rowFrom: number;
  #bounded: boolean;

  /**
   * `boundRecordBytes: false` (a run's range read of a file its upload scanned whole) leaves MAX_CSV_RECORD_BYTES to
   * the upload: measured where pieces end, a record near it could be refused in one read's pieces and taken in the
   * upload's.
   */
  constructor(options: ScanOptions<string[]> & { boundRecordBytes?: boolean }) {
    this.#bounded = options.boundRecordBytes ?? true;
    const start = options.start ?? FILE_START;
    this.#breaks = new LineBreaks(start);
    this.#boundary = start.offset;
    this.#written = start.offset;
    this.#rowFrom = start.offset;
    const parser = parse({
      bom: start.offset === 0,
      skip_empty_lines: true,
      // Rows of another length are the caller's to refuse, with their line.
      relax_column_count: true,
      record_delimiter: ["\r\n", "\n", "\r"],
      max_record_size: MAX_ROW_LINE_BYTES,
      on_record: (fields: string[], info) => {
        const end = start.offset + info.bytes;
        const resumeAt = { offset: this.#boundary, line: this.#breaks.lineAt(this.#boundary) };
        options.onRow(fields, { line: resumeAt.line + (info.empty_lines - this.#blankLines), resumeAt, end });
        this.#boundary = end;
        this.#blankLines = info.empty_lines;
        // Handed out here: nothing goes to the parser's readable side, which no one reads.
        return null;
      },
    }) as TransformStream<Uint8Array, never>;
    this.#writer = parser.writable.getWriter();
    this.#done = parser.readable.getReader().closed;
    // Awaited by `write` and `close`; this only keeps an early failure from counting as unhandled meanwhile.
    this.#done.catch(() => undefined);
  }

  async write(bytes: Uint8Array): Promise<void> {
    if (bytes.length === 0) return;
    // The line count sees the bytes first: the parser asks it about the rows they complete.
    this.#breaks.see(bytes);
    for (let at = 0; at < bytes.length; at += PIECE_BYTES) {
      const piece = bytes.subarray(at, at + PIECE_BYTES);
      try {
        await this.#writer.write(piece);
        // A writer whose stream failed has no desired size: the failure is in `#done`.
        if (this.#writer.desiredSize === null) await this.#done;
      } catch (error) {
        throw this.#located(error);
      }
      if (this.#bounded) this.#measureRow(piece);
    }
    // The parser has taken every row these bytes complete: the breaks held past the last are blank lines (or a row's own).
    if (this.#breaks.pending > MAX_PENDING_BREAKS)
      throw new MalformedUploadError(
        this.#breaks.lineAt(this.#boundary),
        `more than ${MAX_PENDING_BREAKS.toLocaleString("en-US")} blank lines in a row start here`,
      );
  }

  /**
   * Refuses the row being read once its bytes so far pass MAX_CSV_RECORD_BYTES. `piece` is what the parser just
   * took, and handed out every row it completes; a row it held back the end of ends at most LOOKAHEAD_BYTES before.
   */
  #measureRow(piece: Uint8Array): void {
    const pieceStart = this.#written;
    this.#written += piece.length;
    const held = this.#tail;
    const heldStart = pieceStart - held.length;
    let from = pieceStart;
    if (this.#rowFrom !== this.#boundary) {
      this.#rowFrom = this.#boundary;
      this.#rowStart = null;
      from = Math.max(this.#boundary, heldStart);
    }
    for (let offset = from; this.#rowStart === null && offset < this.#written; offset++) {
      const byte = offset < pieceStart ? held[offset - heldStart] : piece[offset - pieceStart];
      if (byte !== LF && byte !== CR) this.#rowStart = offset;
    }
    const last = piece.length >= LOOKAHEAD_BYTES ? piece : new Uint8Array([...held, ...piece]);
    this.#tail = last.slice(-LOOKAHEAD_BYTES);
    if (this.#rowStart !== null && this.#written - this.#rowStart > MAX_CSV_RECORD_BYTES)
      throw new MalformedUploadError(this.#breaks.lineAt(this.#rowStart), TOO_LONG);
  }

  async close(): Promise<void> {
    this.#breaks.end();
    try {
      await this.#writer.close();
      await this.#done;
    } catch (error) {
      throw this.#located(error);
    }
  }

  /** A parser error as a `MalformedUploadError` naming the line its record starts on; other errors as they are. */
  #located(error: unknown): unknown {
    if (!(error instanceof CsvError)) return error;
    const blankLines = typeof error.empty_lines === "number" ? error.empty_lines : this.#blankLines;
    const line = this.#breaks.lineAt(this.#boundary) + (blankLines - this.#blankLines);
    return new MalformedUploadError(line, reasonOf(error));
  }
}

const TOO_LONG = `this row is longer than ${MAX_ROW_LINE_BYTES} bytes, the most one row may hold`;

function reasonOf(error: CsvError): string {
  switch (error.code) {
    case "CSV_QUOTE_NOT_CLOSED":
      return "a quoted field starting in this row is never closed: the file ends inside its quotes";
    case "CSV_INVALID_CLOSING_QUOTE":
      return 'a quoted field in this row has characters after its closing quote; a quote inside a quoted field is written twice ("")';
    case "INVALID_OPENING_QUOTE":
      return 'a field in this row has a quote in the middle of unquoted text; quote the whole field and write the quote twice ("")';
    case "CSV_MAX_RECORD_SIZE":
      return TOO_LONG;
    default:
      // csv-parse counts lines its own way (a quoted CRLF twice): the line named is ours, not its.
      return error.message.replace(/\s*\b(at|on) line \d+/g, "");
  }
}
