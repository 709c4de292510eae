import { parse } from "csv-parse/sync";
import { describe, expect, it } from "vitest";
import type { UploadFormat } from "./limits";
import { type ByteSource, readRows, rowOf } from "./range-reader";
import { UploadScan } from "./upload-scan";

const encode = (text: string) => new TextEncoder().encode(text);

/** A stored file in memory, served in small chunks; it records every range asked for. */
function memorySource(bytes: Uint8Array, reads: Array<{ offset: number; length: number }> = []): ByteSource {
  return {
    async read(range) {
      reads.push(range);
      const slice = bytes.subarray(range.offset, range.offset + range.length);
      let at = 0;
      return new ReadableStream<Uint8Array>({
        pull(controller) {
          if (at >= slice.length) return controller.close();
          controller.enqueue(slice.slice(at, at + 5));
          at += 5;
        },
      });
    },
  };
}

async function indexOf(format: UploadFormat, bytes: Uint8Array, every: number) {
  const scan = new UploadScan({ format, every });
  for (let i = 0; i < bytes.length; i += 64) await scan.write(bytes.subarray(i, i + 64));
  return scan.finish();
}

const notes = ["plain", "with, comma", 'a "quoted" word', "two\nlines", "three\r\nCRLF\nlines", "é日本🎉", "", "ends with newline\n"];

/** A CSV file whose rows stress what a byte range must get right, and the line each row starts on. */
function csvFixture(rowCount: number, eol: string) {
  let text = `\ufeffid,name,note${eol}`;
  let line = 2;
  const lines: number[] = [];
  for (let i = 0; i < rowCount; i++) {
    if (i % 9 === 4) {
      text += eol; // a blank line before this row
      line++;
    }
    const note = notes[i % notes.length]!;
    lines.push(line);
    text += `${i},名前${i},"${note.replaceAll('"', '""')}"${eol}`;
    line += 1 + (note.match(/\r\n|\n|\r/g)?.length ?? 0);
  }
  return { bytes: encode(text), lines };
}

function ndjsonFixture(rowCount: number, eol: string) {
  let text = "";
  let line = 1;
  const lines: number[] = [];
  for (let i = 0; i < rowCount; i++) {
    if (i % 7 === 3) {
      text += `  ${eol}`;
      line++;
    }
    lines.push(line);
    text += `${JSON.stringify({ id: i, note: notes[i % notes.length], nested: { n: [i, "ü"] } })}${eol}`;
    line++;
  }
  return { bytes: encode(text.slice(0, -eol.length)), lines };
}

describe("readRows", () => {
  for (const eol of ["\n", "\r\n"]) {
    it(`CSV (${JSON.stringify(eol)}): every range of rows equals the same rows of the whole file, with their lines`, async () => {
      const { bytes, lines } = csvFixture(41, eol);
      const whole = parse(new TextDecoder().decode(bytes), { columns: true, skip_empty_lines: true, bom: true }) as Record<
        string,
        string
      >[];
      expect(whole).toHaveLength(41);
      const index = await indexOf("csv", bytes, 4);
      const source = memorySource(bytes);
      for (let from = 0; from <= 41; from++) {
        for (const to of new Set([from, from + 1, from + 3, from + 9, 41].filter((t) => t >= from && t <= 41))) {
          const rows = await readRows(source, index, { from, to });
          expect(
            rows.map((r) => r.row),
            `rows [${from}, ${to})`,
          ).toEqual(whole.slice(from, to));
          expect(rows.map((r) => [r.index, r.line])).toEqual(lines.slice(from, to).map((line, i) => [from + i, line]));
        }
      }
    });

    it(`NDJSON (${JSON.stringify(eol)}): every range of rows equals the same rows of the whole file, with their lines`, async () => {
      const { bytes, lines } = ndjsonFixture(30, eol);
      const whole = new TextDecoder()
        .decode(bytes)
        .split(/\r?\n/)
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l));
      const index = await indexOf("ndjson", bytes, 4);
      const source = memorySource(bytes);
      for (let from = 0; from <= 30; from++) {
        for (const to of new Set([from, from + 1, from + 5, 30].filter((t) => t >= from && t <= 30))) {
          const rows = await readRows(source, index, { from, to });
          expect(
            rows.map((r) => r.row),
            `rows [${from}, ${to})`,
          ).toEqual(whole.slice(from, to));
          expect(rows.map((r) => r.line)).toEqual(lines.slice(from, to));
        }
      }
    });
  }

  it("reads only the indexed span around the range, never the whole file", async () => {
    const { bytes } = csvFixture(400, "\n");
    const index = await indexOf("csv", bytes, 10);
    const reads: Array<{ offset: number; length: number }> = [];
    const rows = await readRows(memorySource(bytes, reads), index, { from: 205, to: 212 });
    expect(rows.map((r) => r.row.id)).toEqual(["205", "206", "207", "208", "209", "210", "211"]);
    expect(reads).toEqual([
      { offset: index.positions.at(20)!.offset, length: index.positions.at(22)!.offset - index.positions.at(20)!.offset },
    ]);
    expect(reads[0]!.length).toBeLessThan(bytes.length / 10);
  });

  it("reads a line of a file stored before a key given twice was refused as JSON.parse does, its last value", async () => {
    // The index of a file of the same bytes but for the repeated key: what the scan recorded back then.
    const index = await indexOf("ndjson", encode('{"id":1,"n":1}\n{"id":2,"n":2}\n'), 1);
    const stored = encode('{"id":1,"n":1}\n{"id":2,"id":3}\n');
    expect((await readRows(memorySource(stored), index, { from: 0, to: 2 })).map((r) => r.row)).toEqual([{ id: 1, n: 1 }, { id: 3 }]);
  });

  it("refuses a range outside the upload's rows", async () => {
    const { bytes } = csvFixture(5, "\n");
    const index = await indexOf("csv", bytes, 2);
    await expect(readRows(memorySource(bytes), index, { from: 3, to: 6 })).rejects.toThrow(RangeError);
    await expect(readRows(memorySource(bytes), index, { from: 4, to: 2 })).rejects.toThrow(RangeError);
    expect(await readRows(memorySource(bytes), index, { from: 5, to: 5 })).toEqual([]);
  });
});

describe("rowOf", () => {
  it("makes every column an own property, Object.prototype's names included", () => {
    const row = rowOf(["__proto__", "toString", "a"], ["x", "y", "z"]);
    expect(Object.keys(row)).toEqual(["__proto__", "toString", "a"]);
    expect(Object.getPrototypeOf(row)).toBe(Object.prototype);
    expect(JSON.stringify(row)).toBe('{"__proto__":"x","toString":"y","a":"z"}');
  });
});
