import { describe, expect, it } from "vitest";
import { sha256Hex } from "../core/hash";
import { CsvScanner, MAX_PENDING_BREAKS } from "./csv-scanner";
import { MalformedUploadError } from "./errors";
import { MAX_CSV_RECORD_BYTES, MAX_ROW_LINE_BYTES, type UploadFormat } from "./limits";
import { UploadScan } from "./upload-scan";

const encode = (text: string) => new TextEncoder().encode(text);

/** Scans `text` in chunks of `size` bytes: the index, or the error. */
async function scan(format: UploadFormat, text: string | Uint8Array, size = 7, every = 2): Promise<unknown> {
  const all = typeof text === "string" ? encode(text) : text;
  const scanner = new UploadScan({ format, every });
  try {
    for (let i = 0; i < all.length; i += size) await scanner.write(all.subarray(i, i + size));
    return await scanner.finish();
  } catch (error) {
    return error;
  }
}

/** Scans `parts`, each a chunk: the index, or the error. */
async function scanParts(format: UploadFormat, parts: string[]): Promise<unknown> {
  const scanner = new UploadScan({ format });
  try {
    for (const part of parts) await scanner.write(encode(part));
    return await scanner.finish();
  } catch (error) {
    return error;
  }
}

async function malformedLine(format: UploadFormat, text: string, size = 7) {
  const error = await scan(format, text, size);
  expect(error).toBeInstanceOf(MalformedUploadError);
  return { line: (error as MalformedUploadError).line, message: (error as Error).message };
}

describe("UploadScan: CSV", () => {
  it("counts rows and bytes, takes the header's columns, and indexes every `every`-th row where it starts", async () => {
    const text = 'id,note\n1,"two\nlines"\n\n2,é\r\n3,x\n';
    for (const size of [1, 3, 1000]) {
      expect(await scan("csv", text, size, 1)).toEqual({
        format: "csv",
        columns: ["id", "note"],
        rows: 3,
        bytes: encode(text).length,
        // The same hash however the bytes were split.
        sha256: await sha256Hex(text),
        every: 1,
        // Each row may be read from just past the one before it: row 1 from the blank line (line 4) before it.
        positions: [
          { offset: 8, line: 2 },
          { offset: 22, line: 4 },
          { offset: 29, line: 6 },
        ],
      });
    }
    expect(await scan("csv", text, 5, 2)).toMatchObject({ every: 2, positions: [{ offset: 8 }, { offset: 29 }] });
  });

  it("keeps at most `maxPositions` positions, doubling `every` as often as that takes", async () => {
    const text = `id\n${Array.from({ length: 7 }, (_, i) => `${i}\n`).join("")}`;
    const scanned = async (every: number, maxPositions?: number) => {
      const scanner = new UploadScan({ format: "csv", every, maxPositions });
      await scanner.write(encode(text));
      return scanner.finish();
    };
    // Rows 0, 1, 2; then 0, 2, 4; then 0 and 4: the index a scan every 4th row makes.
    const thinned = await scanned(1, 3);
    expect(thinned).toEqual(await scanned(4));
    expect(thinned).toMatchObject({
      every: 4,
      positions: [
        { offset: 3, line: 2 },
        { offset: 11, line: 6 },
      ],
    });
  });

  it("accepts a header without rows, and skips a UTF-8 byte-order mark", async () => {
    expect(await scan("csv", "\ufeffa,b\n")).toMatchObject({ columns: ["a", "b"], rows: 0, positions: [] });
  });

  it("refuses a ragged row, naming the line it starts on", async () => {
    expect(await malformedLine("csv", 'a,b\n1,2\n"x\ny",2,3\n')).toEqual({
      line: 3,
      message: "line 3: this row has 3 fields, the header (line 1) has 2 columns",
    });
    expect((await malformedLine("csv", "a,b\r\n\r\n1\r\n")).line).toBe(3);
  });

  it("refuses more than a million blank lines in a row, naming the line they start on, and takes rows of one byte by the million", async () => {
    // Held one by one until the next row, their offsets would fill the isolate (a file of line feeds).
    const blank = `a\n1\n${"\n".repeat(MAX_PENDING_BREAKS + 10)}2\n`;
    expect(await malformedLine("csv", blank, 1 << 20)).toEqual({
      line: 3,
      message: "line 3: more than 1,000,000 blank lines in a row start here",
    });
    // As many breaks that end rows pass, in chunks of any size.
    const rows = `a\n${"1\n".repeat(MAX_PENDING_BREAKS + 10)}`;
    expect(await scan("csv", rows, 4 << 20, 1 << 20)).toMatchObject({ rows: MAX_PENDING_BREAKS + 10 });
  });

  it("takes a column of no name as no field (pandas' index, a trailing comma), and refuses a header that names none", async () => {
    for (const header of ["id,,name", "id,name,", '"",id', 'id,"",""', ",id,name,"]) {
      const fields = header.split(",").length;
      expect(await scan("csv", `\n${header}\n${"1,".repeat(fields - 1)}1\n`), header).toMatchObject({ rows: 1 });
    }
    for (const header of [",", '""', '"",,""'])
      expect(await malformedLine("csv", `\n${header}\n1,2,3\n`), header).toMatchObject({
        line: 2,
        message: expect.stringContaining("the header names no column"),
      });
    // A name of spaces is a name.
    expect(await scan("csv", "id, \n1,2\n")).toMatchObject({ columns: ["id", " "], rows: 1 });
  });

  it("refuses an empty file, a header naming a column twice, too many columns", async () => {
    expect(await malformedLine("csv", "")).toMatchObject({ line: 1, message: expect.stringContaining("empty") });
    expect(await malformedLine("csv", "\n\n")).toMatchObject({ line: 1, message: expect.stringContaining("empty") });
    expect(await malformedLine("csv", "a,b,a\n1,2,3\n")).toMatchObject({ line: 1, message: expect.stringContaining('"a" twice') });
    expect(await malformedLine("csv", `${Array.from({ length: 1001 }, (_, i) => `c${i}`).join(",")}\n`)).toMatchObject({ line: 1 });
  });

  it("refuses broken quoting, naming the line where the row starts, however the file is chunked", async () => {
    for (const size of [1, 4, 1000]) {
      expect((await malformedLine("csv", 'a,b\r\n1,"x\r\n\r\ny\r\n2,3\r\n', size)).line, `chunks of ${size}`).toBe(2);
      expect((await malformedLine("csv", 'a,b\n1,2\n\n3,"x"y\n', size)).line).toBe(4);
      expect((await malformedLine("csv", 'a,b\n1,x"y"\n', size)).line).toBe(2);
    }
  });

  it("refuses a row of empty fields past the bytes a row may take as written, naming its line, however the file is chunked", async () => {
    const tooLong = "this row is longer than 65536 bytes, the most one row may hold";
    const empty = ",".repeat(MAX_CSV_RECORD_BYTES);
    const quotedEmpty = '"",'.repeat(MAX_CSV_RECORD_BYTES / 3 + 1);
    for (const size of [2, 1000, 100_000])
      expect(await malformedLine("csv", `a,b\r\n1,2\r\n\r\n\n${empty}\n`, size)).toEqual({ line: 5, message: `line 5: ${tooLong}` });
    for (const size of [7, 100_000])
      expect(await malformedLine("csv", `a,b\n"1\n",2\n${quotedEmpty}`, size)).toEqual({ line: 4, message: `line 4: ${tooLong}` });
    // A row within the row limit by its characters, of three bytes each, is not past it as written: it is past it
    // as UTF-8 JSON, as the same row in hand is.
    const wide = `${Array.from({ length: 1000 }, () => "€".repeat(60)).join(",")}\n`;
    expect(encode(wide).length).toBeGreaterThan(2.5 * MAX_ROW_LINE_BYTES);
    const header = `${Array.from({ length: 1000 }, (_, i) => `c${i}`).join(",")}\n`;
    for (const size of [7, 100_000])
      expect(await malformedLine("csv", `${header}${wide}${wide}`, size)).toEqual({
        line: 2,
        message: expect.stringMatching(/^line 2: this row is 189891 bytes as JSON/),
      });
  });

  it("leaves the bound on a record's bytes to the upload: a range read's scanner takes such a record", async () => {
    const record = `${",".repeat(MAX_CSV_RECORD_BYTES + 10)}\n`;
    const fields: number[] = [];
    const reader = new CsvScanner({ onRow: (row) => fields.push(row.length), boundRecordBytes: false });
    for (let at = 0; at < record.length; at += 4096) await reader.write(encode(record.slice(at, at + 4096)));
    await reader.close();
    expect(fields).toEqual([MAX_CSV_RECORD_BYTES + 11]);
    // The upload's own scanner refuses it.
    expect(await malformedLine("csv", `a\n${record}`, 4096)).toMatchObject({ line: 2 });
  });

  it("refuses a row longer than a row may be, and a UTF-16 file", async () => {
    expect(await malformedLine("csv", `a\n1\n${"x".repeat(70_000)}\n`)).toMatchObject({
      line: 3,
      message: expect.stringContaining("longer"),
    });
    const utf16 = new Uint8Array([0xff, 0xfe, 0x61, 0x00]);
    expect(await scan("csv", utf16, 1)).toMatchObject({ code: "malformed_upload", message: expect.stringContaining("UTF-16") });
  });
});

describe("UploadScan: a row's size as JSON", () => {
  it("takes a row of exactly the row limit as UTF-8 JSON and refuses one byte more, in CSV and NDJSON, however chunked", async () => {
    // `{"a":"` and `"}` are 8 bytes, each control character 6 (\u0001): 8 + 60,000 + 5,528 is the limit.
    const csvRow = (x: number) => `${"\u0001".repeat(10_000)}${"x".repeat(x)}`;
    for (const size of [7, 100_000]) {
      expect(await scan("csv", `a\n${csvRow(5528)}\n`, size)).toMatchObject({ rows: 1 });
      expect(await malformedLine("csv", `a\n1\n${csvRow(5529)}\n`, size)).toEqual({
        line: 3,
        message: `line 3: this row is ${MAX_ROW_LINE_BYTES + 1} bytes as JSON, as a run holds it (a control character is six bytes there, \\u0001), over ${MAX_ROW_LINE_BYTES}, the most one row may hold`,
      });
    }
    // A column of no name is no field of the row, so not of its JSON.
    expect(await scan("csv", `,a\nzzz,${csvRow(5528)}\n`)).toMatchObject({ rows: 1 });
    // `{"n":[` and `]}` are 8 bytes, each 1e20 21 as JSON, each 1 one, and a comma between two: with a last 12, the limit.
    const ndjsonRow = (last: string) => `{"n":[${[...Array(2900).fill("1e20"), ...Array(863).fill("1"), last].join(",")}]}\n`;
    expect(JSON.stringify(JSON.parse(ndjsonRow("12"))).length).toBe(MAX_ROW_LINE_BYTES);
    expect(await scan("ndjson", ndjsonRow("12"), 1000)).toMatchObject({ rows: 1 });
    expect(await malformedLine("ndjson", `\n${ndjsonRow("123")}`, 1000)).toMatchObject({ line: 2 });
  });
});

describe("UploadScan: NDJSON", () => {
  it("counts rows and bytes, gathers every field name in the order first seen, indexes rows", async () => {
    const text = '\ufeff{"a":1}\n\n{"b":"é","a":2}\r\n  \n{"c":null}';
    for (const size of [1, 5, 1000]) {
      expect(await scan("ndjson", text, size)).toEqual({
        format: "ndjson",
        columns: ["a", "b", "c"],
        rows: 3,
        bytes: encode(text).length,
        // The same hash however the bytes were split.
        sha256: await sha256Hex(text),
        every: 2,
        positions: [
          { offset: 0, line: 1 },
          { offset: 30, line: 4 },
        ],
      });
    }
  });

  it("refuses a line that is not JSON, not an object, not UTF-8, too deep or too long, naming it", async () => {
    expect(await malformedLine("ndjson", '{"a":1}\n\n{"a":\n')).toMatchObject({
      line: 3,
      message: expect.stringContaining("not valid JSON"),
    });
    expect(await malformedLine("ndjson", '{"a":1}\n[1,2]\n')).toEqual({
      line: 2,
      message: "line 2: each line must be a JSON object; this one is an array",
    });
    expect(await malformedLine("ndjson", "42")).toMatchObject({ line: 1, message: expect.stringContaining("a number") });
    expect(await malformedLine("ndjson", '{"a":1}\nnull\n')).toMatchObject({ line: 2 });
    const invalidUtf8 = new Uint8Array([...encode('{"a":1}\n{"a":"'), 0xc3, 0x28, ...encode('"}\n')]);
    expect(await scan("ndjson", invalidUtf8)).toMatchObject({ line: 2, message: expect.stringContaining("UTF-8") });
    expect(await malformedLine("ndjson", `{"a":${"[".repeat(40)}${"]".repeat(40)}}`)).toMatchObject({ line: 1 });
    for (const size of [1000, 100_000]) {
      expect(await malformedLine("ndjson", `{}\n{"a":"${"x".repeat(70_000)}"}\n`, size)).toMatchObject({
        line: 2,
        message: expect.stringContaining("longer"),
      });
    }
  });

  it("refuses a key given twice in one object, naming the line and the key (JSON.parse kept the last value)", async () => {
    for (const size of [3, 1000]) {
      expect(await malformedLine("ndjson", '{"id":1,"name":"a"}\n\n{"id":2,"name":"b","id":"3"}\n', size)).toEqual({
        line: 3,
        message: 'line 3: the field "id" is given twice in one object (JSON keeps only the last value); give each field once',
      });
    }
    expect(await malformedLine("ndjson", '{"id":1,"meta":{"tags":[{"k":1,"k":2}]}}\n')).toMatchObject({
      line: 1,
      message: expect.stringContaining('the field "k" of meta.tags.0 is given twice'),
    });
    // The same name in two objects, or as a value, is no repeat.
    expect(await scan("ndjson", '{"id":"id","sub":{"id":1}}\n{"id":2}\n')).toMatchObject({ rows: 2, columns: ["id", "sub"] });
  });

  it("measures a line without its CR and byte-order mark, however the chunks fall", async () => {
    const lineOf = (bytes: number) => `{"a":"${"x".repeat(bytes - 8)}"}`;
    const line = lineOf(MAX_ROW_LINE_BYTES);
    const over = lineOf(MAX_ROW_LINE_BYTES + 1);
    // Whole, cut between each CR and its LF (the first line's after its byte-order mark), and in chunks of 1,000.
    const chunkings = (text: string) => [[text], text.split(/(?<=\r)/), text.match(/[\s\S]{1,1000}/g)!];
    for (const parts of chunkings(`\ufeff${line}\r\n${line}\r\n${line}`))
      expect(await scanParts("ndjson", parts), `${parts.length} chunks`).toMatchObject({ rows: 3 });
    for (const parts of chunkings(`${line}\r\n${over}\r\n`))
      expect(await scanParts("ndjson", parts), `${parts.length} chunks`).toMatchObject({
        line: 2,
        message: expect.stringContaining("longer"),
      });
  });

  it("takes a file without rows as no rows, as a CSV of its header (a run over it completes)", async () => {
    for (const text of ["", "\n \n"])
      expect(await scan("ndjson", text)).toMatchObject({ format: "ndjson", columns: [], rows: 0, bytes: text.length, positions: [] });
  });
});
