/** The constructors play and tool authors use. */
import { hasUnkeepableField, headerProblem, isUnnamedColumn, UNKEEPABLE_FIELD, UNKEEPABLE_FIELD_MESSAGE } from "../core/row-fields";
import { z } from "zod";
import { CsvError, type Options, parse } from "csv-parse/sync";
import { MAX_ISSUES, messageOf } from "../core/errors";
import { hasLoneSurrogate, utf8Bytes } from "../core/utf8";
import { describeInputAs } from "./json-schema";
import type { PlayDefinition, Row, ToolBinding, ToolDefinition, UploadedRows } from "./types";

export type * from "./types";
export { AUTH_SCOPE_CHANGED, ToolCallError } from "./tool-error";
export { describeInputAs } from "./json-schema";

/** A declared dataset's name: it travels in URLs (`/v1/runs/<id>/datasets/<name>`). */
const DATASET_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

/** Declares a play. Register it in `src/plays/index.ts` to make it runnable. */
export function definePlay<Input, Result>(play: PlayDefinition<Input, Result>): PlayDefinition<Input, Result> {
  if (!/^[a-z0-9][a-z0-9-]{0,63}$/.test(play.name)) throw new Error(`play name ${JSON.stringify(play.name)} must match [a-z0-9-]{1,64}`);
  for (const [i, name] of (play.datasets ?? []).entries()) {
    if (!DATASET_NAME.test(name))
      throw new Error(
        `play ${play.name}: dataset name ${JSON.stringify(name)} must match [A-Za-z0-9_.-]{1,64}, starting with a letter or digit`,
      );
    if (play.datasets!.indexOf(name) !== i) throw new Error(`play ${play.name}: dataset ${JSON.stringify(name)} is declared twice`);
  }
  return play;
}

/** Declares a tool. Register it in `src/tools/index.ts`. */
export function defineTool<Input, Output, Bindings extends ToolBinding = never>(
  tool: ToolDefinition<Input, Output, Bindings>,
): ToolDefinition<Input, Output, Bindings> {
  if (!/^[a-z0-9_]{1,64}$/.test(tool.id)) throw new Error(`tool id ${JSON.stringify(tool.id)} must match [a-z0-9_]{1,64}`);
  if (tool.batch && !(Number.isInteger(tool.batch.maxMembers) && tool.batch.maxMembers >= 1)) {
    throw new Error(`tool ${tool.id}: batch.maxMembers must be a positive integer`);
  }
  if (typeof tool.price === "number" && !(Number.isFinite(tool.price) && tool.price >= 0)) {
    throw new Error(`tool ${tool.id}: price must be a finite number of credits, at least 0`);
  }
  return tool;
}

/**
 * A row's id as rows give it: a string, or a number, as a string (`7` and
 * `"7"` are one row). Not `z.coerce.string()`, which takes `null` as "null"
 * and `{}` as "[object Object]": rows with no id merged into one. A whole
 * number past 2^53 is refused: JSON parses it to the nearest double, so
 * `12345678901234567890` and `12345678901234567891` would be one row, keyed
 * by digits no one sent.
 */
export const RowId = z
  .union([z.string(), z.number()])
  .transform((id, ctx) => {
    if (typeof id === "number" && Number.isInteger(id) && !Number.isSafeInteger(id)) {
      ctx.addIssue({
        code: "custom",
        message: `is a number past ${Number.MAX_SAFE_INTEGER}, whose last digits JSON does not keep: send the id as a string`,
      });
      return z.NEVER;
    }
    return String(id);
  })
  .pipe(
    z
      .string()
      .min(1)
      .max(200)
      .refine((id) => !hasLoneSurrogate(id), "is not well-formed Unicode (a lone surrogate, as `\\ud800` in JSON)"),
  );

/** Limits on a play's row input; larger inputs are a 400, never a crash. */
export const MAX_INPUT_ROWS = 100_000;
export const MAX_ROW_BYTES = 64 * 1024;
/**
 * The most bytes a run's rows in hand may take as JSON, all together: a run's
 * input goes to its coordinator in one RPC, of at most 32 MiB. A JSON body is
 * at most 16 MiB, but CSV text grows as it is parsed (each row repeats the
 * header's column names): 400 KB of it can be 80 MB of rows.
 */
export const MAX_INPUT_ROWS_BYTES = 24 * 1024 * 1024;

/**
 * The most bytes one CSV record may take as written, its quotes, delimiters
 * and quoted line breaks included. csv-parse's own limit counts a record's
 * field characters, and a record of empty fields (`,,,,`) has none: without
 * this, a megabyte of delimiters is a million fields, held until the record
 * ends. A record whose row fits {@link MAX_ROW_BYTES} as JSON takes at most
 * three bytes for each of its characters there (a three-byte UTF-8
 * character; a quote is two, `""`, as in JSON, `\"`), so this refuses no such row.
 */
export const MAX_CSV_RECORD_BYTES = 4 * MAX_ROW_BYTES;

/**
 * An input schema for plays over rows, accepting `{ rows: [...] }`,
 * `{ csv: "header\n..." }` (RFC 4180: quotes, embedded commas and newlines)
 * or `{ upload: "<uploadId>" }` (docs/api.md "Large inputs: uploads").
 * The play receives `{ rows }`: rows validated by `row`, or for an upload
 * {@link UploadedRows}, which `ctx.map` reads and validates by `row` chunk
 * by chunk as it runs them (a row that does not fit fails alone).
 *
 * @example
 * input: rowsInput(z.object({ id: RowId, name: z.string() }))
 */
export function rowsInput<R extends z.ZodType<Row, unknown>>(row: R) {
  // What the input's JSON Schema says of rows; checkRows checks them, one by one.
  const rows = z.array(row).max(MAX_INPUT_ROWS);
  const uploaded = z.object({ upload: UploadId }).strict();
  const input = z
    .object({ rows: z.unknown().optional(), csv: z.string().optional(), upload: z.unknown().optional() })
    .strict()
    .transform((value, ctx): { rows: z.output<R>[] | UploadedRows } => {
      const given = (["rows", "csv", "upload"] as const).filter((k) => value[k] !== undefined);
      if (given.length !== 1) {
        ctx.addIssue({
          code: "custom",
          path: ["rows"],
          message: "give exactly one of rows (an array), csv (text) or upload (an upload id)",
        });
        return z.NEVER;
      }
      // `{ rows: { upload } }` is how a run with an upload input is stored, and read back by a rerun.
      const upload = value.upload !== undefined ? { upload: value.upload } : isUploadedRows(value.rows) ? value.rows : null;
      if (upload) {
        const parsed = uploaded.safeParse(upload);
        if (parsed.success) return { rows: parsed.data };
        ctx.addIssue({
          code: "custom",
          path: [value.upload !== undefined ? "upload" : "rows"],
          message: "upload must be an upload id (up_…)",
        });
        return z.NEVER;
      }
      let source: unknown = value.rows;
      const path = value.csv === undefined ? "rows" : "csv";
      if (value.csv !== undefined) {
        try {
          source = parseCsvRows(value.csv);
        } catch (error) {
          ctx.addIssue({
            code: "custom",
            path: ["csv"],
            message: `CSV does not parse: ${error instanceof Error ? error.message : String(error)}`,
          });
          return z.NEVER;
        }
      }
      const report = (at: PropertyKey[], message: string) =>
        ctx.addIssue({ code: "custom", path: [path, ...at.map((p) => (typeof p === "symbol" ? String(p) : p))], message });
      if (!Array.isArray(source)) {
        report([], "rows must be an array of rows");
        return z.NEVER;
      }
      const checked = checkRows(row, source, report);
      return checked ? { rows: checked } : z.NEVER;
    });
  ROW_SCHEMAS.set(input, row);
  // The transform hides the row schema from JSON Schema: document the shapes it accepts.
  return describeInputAs(
    input,
    z.union([
      z.object({ rows }).strict(),
      z.object({ csv: z.string().describe("RFC 4180 CSV text with a header line; each row as in rows") }).strict(),
      z.object({ upload: z.string().describe("an upload's id (POST /v1/uploads); its rows are read as the run executes them") }).strict(),
    ]),
  );
}

/** The issues of rows a refused input lists (one more says how many rows did not fit), as any error lists at most MAX_ISSUES. */
const MAX_ROW_ISSUES = MAX_ISSUES - 1;

/**
 * Rows checked one by one against `row`, the first {@link MAX_ROW_ISSUES}
 * issues reported (and then how many rows did not fit); null when any row
 * did not fit.
 */
function checkRows<R extends z.ZodType<Row, unknown>>(
  row: R,
  list: unknown[],
  report: (at: PropertyKey[], message: string) => void,
): z.output<R>[] | null {
  if (list.length > MAX_INPUT_ROWS) {
    report([], `at most ${MAX_INPUT_ROWS} rows per run; larger inputs go in an upload (POST /v1/uploads)`);
    return null;
  }
  const checked: z.output<R>[] = [];
  let failed = 0;
  let issues = 0;
  let bytes = 0;
  const refuse = (at: PropertyKey[], message: string) => {
    if (issues++ < MAX_ROW_ISSUES) report(at, message);
  };
  for (const [i, value] of list.entries()) {
    if (value !== null && typeof value === "object" && hasUnkeepableField(value)) {
      failed++;
      refuse([i, UNKEEPABLE_FIELD], UNKEEPABLE_FIELD_MESSAGE);
      continue;
    }
    const result = safeParseRow(row, value);
    if (!result.success) {
      failed++;
      for (const issue of result.error.issues) refuse([i, ...issue.path], issue.message);
      continue;
    }
    const rowBytes = utf8Bytes(JSON.stringify(result.data));
    if (rowBytes > MAX_ROW_BYTES) {
      failed++;
      refuse([i], `row is over ${MAX_ROW_BYTES} bytes`);
      continue;
    }
    bytes += rowBytes;
    if (bytes > MAX_INPUT_ROWS_BYTES) {
      // The rest is not read: rows past this cost CPU and memory, and the input is refused whatever they hold.
      report([], `the rows are over ${MAX_INPUT_ROWS_BYTES} bytes as JSON by row ${i}; put them in an upload (POST /v1/uploads)`);
      return null;
    }
    checked.push(result.data);
  }
  if (issues > MAX_ROW_ISSUES) report([], `${failed} rows do not fit (${issues} issues; the first ${MAX_ROW_ISSUES} are listed)`);
  return failed > 0 ? null : checked;
}

/** `row.safeParse`, with a transform that throws reported as the row's issue (not a 5xx for the whole request). */
function safeParseRow<R extends z.ZodType<Row, unknown>>(
  row: R,
  value: unknown,
): { success: true; data: z.output<R> } | { success: false; error: { issues: { path: PropertyKey[]; message: string }[] } } {
  try {
    return row.safeParse(value);
  } catch (error) {
    return { success: false, error: { issues: [{ path: [], message: `the row schema threw: ${messageOf(error).slice(0, 500)}` }] } };
  }
}

/** An upload's id, as `POST /v1/uploads` gives them out. */
const UploadId = z.string().regex(/^up_[0-9a-f]{32}$/, "an upload id (up_ and 32 hex digits)");

/** The row schema of each `rowsInput` schema: what rows read from an upload are checked against. */
const ROW_SCHEMAS = new WeakMap<object, z.ZodType<Row, unknown>>();

/** The row schema of a play's input when it is a `rowsInput` (rows of an upload are checked against it), else null. */
export function rowSchemaOf(input: z.ZodType<unknown, unknown>): z.ZodType<Row, unknown> | null {
  return ROW_SCHEMAS.get(input) ?? null;
}

/** True when `rows` are in an upload rather than in hand. */
export function isUploadedRows(rows: unknown): rows is UploadedRows {
  return typeof rows === "object" && rows !== null && !Array.isArray(rows) && typeof (rows as UploadedRows).upload === "string";
}

/**
 * CSV text with a header line as row objects. Records end at CRLF, LF or a
 * lone CR, as an upload's do (src/uploads/csv-scanner.ts). Each cell is an
 * own property, so a column named like an Object.prototype member
 * (`toString`) is the row's data like any other. A column named twice would
 * silently keep only its last cell, so such a header is refused instead, as
 * is a record past {@link MAX_CSV_RECORD_BYTES}. A refusal names the line the
 * record starts on, as an upload's does: csv-parse's own count is where it
 * stopped, and counts a quoted CRLF twice.
 */
function parseCsvRows(text: string): Row[] {
  // Where the record's first field ends, in csv-parse's byte count: `cast` sees each field as it ends, with that count.
  // What follows it is a lower bound of the record's bytes, and holds its every other field.
  let firstFieldEnd = 0;
  let header: (string | false)[] | null = null;
  // Where the last record ends (past its line break, in csv-parse's UTF-8 byte count) and the blank lines skipped by
  // then: the next record starts on the line after, past the blank lines skipped since. Lines are counted only for a
  // refusal.
  let lastEnd = 0;
  let lastBlankLines = 0;
  let headerLine = () => 1;
  const lineOf = (blankLines: number) => lineAtByte(text, lastEnd) + blankLines - lastBlankLines;
  const refuse = (blankLines: number, reason: string) => new Error(`line ${lineOf(blankLines)}: ${reason}`);
  const options: Options<Row, string[]> = {
    skip_empty_lines: true,
    bom: true,
    record_delimiter: ["\r\n", "\n", "\r"],
    // Rows of another length are refused here, naming their line.
    relax_column_count: true,
    // One row past the limit is enough to refuse it: a 16 MiB text of short lines is millions of rows, past an
    // isolate's memory. The header is a record too.
    to: MAX_INPUT_ROWS + 2,
    cast: (field, context) => {
      if (context.index === 0) firstFieldEnd = context.bytes;
      else if (context.bytes - firstFieldEnd > MAX_CSV_RECORD_BYTES)
        throw refuse(context.empty_lines, `this row is longer than ${MAX_ROW_BYTES} bytes, the most one row may hold`);
      return field;
    },
    on_record: (fields: string[], info) => {
      let row: Row | null = null;
      if (header === null) {
        header = refuseBadHeader(fields);
        const [end, blankLines] = [lastEnd, lastBlankLines];
        headerLine = () => lineAtByte(text, end) + info.empty_lines - blankLines;
      } else if (fields.length !== header.length) {
        const count = `${fields.length} field${fields.length === 1 ? "" : "s"}`;
        throw refuse(info.empty_lines, `this row has ${count}, the header (line ${headerLine()}) has ${header.length} columns`);
      } else row = rowOf(header, fields);
      lastEnd = info.bytes;
      lastBlankLines = info.empty_lines;
      return row;
    },
  };
  let rows: Row[];
  try {
    // The typings give records of their own objects only with `columns`: here `on_record` makes them.
    rows = parse(text, options as unknown as Options) as unknown as Row[];
  } catch (error) {
    if (!(error instanceof CsvError)) throw error;
    // csv-parse's line is where it stopped, counting a quoted CRLF twice: the line named is where the record starts.
    const blankLines = typeof error.empty_lines === "number" ? error.empty_lines : lastBlankLines;
    throw refuse(blankLines, error.message.replace(/\s*\b(at|on) line \d+/g, ""));
  }
  // Empty text is no table: rows need the header's column names (an empty upload is refused so too).
  if (header === null) throw new Error("the text has no header line (the first line names the columns)");
  return rows;
}

/** A CSV row as an object: each named column an own property (a column named `toString` is data like any other). */
function rowOf(columns: readonly (string | false)[], fields: readonly string[]): Row {
  const row: Row = {};
  columns.forEach((column, i) => {
    if (column === false) return;
    Object.defineProperty(row, column, { value: fields[i], enumerable: true, writable: true, configurable: true });
  });
  return row;
}

/**
 * The 1-based line of `text` that its UTF-8 byte `offset` is on, as an upload counts lines: CRLF, LF and a lone CR
 * each end one. Walks the text from its start: for a refusal's message only.
 */
function lineAtByte(text: string, offset: number): number {
  let line = 1;
  let bytes = 0;
  for (let i = 0; i < text.length && bytes < offset; i++) {
    const unit = text.charCodeAt(i);
    // A CRLF is counted at its CR; a lone LF or CR on its own.
    if (unit === 0x0d || (unit === 0x0a && text.charCodeAt(i - 1) !== 0x0d)) line++;
    // A surrogate pair is four bytes, two per unit; a lone surrogate is encoded as U+FFFD's three.
    bytes += unit < 0x80 ? 1 : unit < 0x800 ? 2 : isPairedSurrogate(text, i) ? 2 : 3;
  }
  return line;
}

function isPairedSurrogate(text: string, i: number): boolean {
  const unit = text.charCodeAt(i);
  if (unit >= 0xd800 && unit <= 0xdbff) {
    const next = text.charCodeAt(i + 1);
    return next >= 0xdc00 && next <= 0xdfff;
  }
  if (unit >= 0xdc00 && unit <= 0xdfff) {
    const previous = text.charCodeAt(i - 1);
    return previous >= 0xd800 && previous <= 0xdbff;
  }
  return false;
}

/** The header's names, refused as an upload's are (core/row-fields.ts); a column of no name is `false`, no field. */
function refuseBadHeader(header: string[]): (string | false)[] {
  const problem = headerProblem(header);
  if (problem !== null) throw new Error(problem);
  return header.map((column) => !isUnnamedColumn(column) && column);
}

/**
 * The bindings `tool` declared, copied out of the Worker's: what its calls
 * receive as `env`, so a tool cannot reach a binding it did not ask for.
 */
export function toolEnv(tool: Pick<ToolDefinition, "bindings">, env: Env): Env {
  const own: Partial<Record<ToolBinding, unknown>> = {};
  for (const name of tool.bindings ?? []) own[name] = env[name];
  // The runtime holds every tool as ToolDefinition<any, unknown, ToolBinding>; the tool sees only its own.
  return Object.freeze(own) as Env;
}
