/**
 * What an upload may hold (docs/api.md "Large inputs: uploads"). Each limit
 * is checked while the file streams past, so an upload over one is refused
 * without the file ever being held in memory.
 */
import type { Upload } from "../api/contract";
import { MAX_ROW_BYTES } from "../play/define";

/** The formats an upload may be in. */
export type UploadFormat = Upload["format"];

/**
 * The most bytes one request may carry: a single-request upload, or one part
 * of a multipart upload. Cloudflare refuses request bodies past 100 MB on
 * most plans; this stays under that with room for the headers.
 */
export const MAX_REQUEST_UPLOAD_BYTES = 95_000_000;

/**
 * A multipart upload's parts (R2's rule): every part but the last at least
 * this large, all of them the same size, the last no larger.
 */
export const MIN_PART_BYTES = 5 * 1024 * 1024;

/** R2 numbers a multipart upload's parts 1 to 10,000. */
export const MAX_PARTS = 10_000;

/** The most rows (data lines) one upload may hold: what one run may hold. */
export const MAX_UPLOAD_ROWS = 10_000_000;

/** The most columns of a CSV header, and distinct fields across an NDJSON file. */
export const MAX_COLUMNS = 1_000;

/**
 * The most characters an NDJSON file's distinct field names may have together,
 * as a CSV header line may (the upload's record keeps them, and every chunk's
 * reader reads that record).
 */
export const MAX_COLUMN_NAMES_CHARS = 64 * 1024;

/**
 * The longest row: a CSV record (its quoted line breaks included) or an
 * NDJSON line. A longer row could not be a run's row anyway ({@link MAX_ROW_BYTES}).
 */
export const MAX_ROW_LINE_BYTES = MAX_ROW_BYTES;

/**
 * The most bytes a row may take as UTF-8 JSON, as a run holds it: what a
 * run's row in hand may take. A row within {@link MAX_ROW_LINE_BYTES} as
 * written may pass it: a control character is one byte in a file and six as
 * JSON (`\u0001`), and each CSV row repeats the header's column names.
 */
export const MAX_ROW_JSON_BYTES = MAX_ROW_BYTES;

/**
 * How many times its bytes in the file a row's UTF-8 JSON may take at most: a
 * control character's six (`\u0001`); an NDJSON `1e20` is written out in 21.
 */
export const MAX_JSON_GROWTH = 6;

/** The most bytes a CSV record may take as written, however few characters its fields hold. */
export { MAX_CSV_RECORD_BYTES } from "../play/define";

/** How deeply an NDJSON row may nest objects and arrays, as a run's JSON input may (src/http/json-body.ts). */
export const MAX_ROW_DEPTH = 32;

/**
 * The index keeps the byte offset and line of every this-many-th row, as
 * many as a map's chunk holds by default (`chunkRows`), so that a chunk of an
 * upload of up to a million rows is read from exactly where it starts: a reader
 * of rows `[from, to)` reads at most `every - 1` rows it does not return.
 */
export const INDEX_EVERY_ROWS = 100;

/**
 * The most positions an index holds (about 200 KB as JSON): a larger file's
 * index keeps every other position, twice over if need be, so 10,000,000 rows
 * are indexed every 1,600th row.
 */
export const MAX_INDEX_POSITIONS = 10_000;
