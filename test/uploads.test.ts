/**
 * Uploads over the real HTTP API, into the real R2 binding (miniflare's):
 * round trips, the checks that refuse a malformed file and leave nothing
 * behind, multipart, org isolation, and rows read back by byte range.
 */
import { env } from "cloudflare:workers";
import { parse } from "csv-parse/sync";
import { describe, expect, it } from "vitest";
import { MAX_ROW_LINE_BYTES, MIN_PART_BYTES } from "../src/uploads/limits";
import { readRows } from "../src/uploads/range-reader";
import { Uploads } from "../src/uploads/uploads";
import { sha256Hex } from "../src/core/hash";
import { api, apiJson } from "./helpers";

const CSV = "text/csv";
const NDJSON = "application/x-ndjson";
const encode = (text: string) => new TextEncoder().encode(text);

/** Every key in the bucket. */
async function bucketKeys(): Promise<string[]> {
  const keys: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await env.UPLOADS.list({ cursor });
    keys.push(...page.objects.map((o) => o.key));
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return keys.sort();
}

async function storedBytes(uploadId: string): Promise<Uint8Array> {
  const object = await env.UPLOADS.get(`dev/${uploadId}/data`);
  expect(object, `the data of ${uploadId}`).not.toBeNull();
  return new Uint8Array(await object!.arrayBuffer());
}

/** A digest to compare megabytes by (a deep equality of them takes the test runner half a minute). */
async function sha256(bytes: Uint8Array): Promise<string> {
  return Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)), (b) => b.toString(16).padStart(2, "0")).join("");
}

function upload(body: BodyInit, contentType: string, init: { token?: string; headers?: Record<string, string> } = {}) {
  return apiJson("/v1/uploads", { method: "POST", body, token: init.token, headers: { "Content-Type": contentType, ...init.headers } });
}

/** `bytes` as a stream of small chunks, sent without a Content-Length. */
function streamOf(bytes: Uint8Array, chunkBytes = 64 * 1024): ReadableStream<Uint8Array> {
  let at = 0;
  return new ReadableStream({
    pull(controller) {
      if (at >= bytes.length) return controller.close();
      controller.enqueue(bytes.slice(at, at + chunkBytes));
      at += chunkBytes;
    },
  });
}

/** `parts` as a stream of exactly those chunks, sent without a Content-Length. */
function streamOfParts(parts: Uint8Array[]): ReadableStream<Uint8Array> {
  let at = 0;
  return new ReadableStream({
    pull(controller) {
      if (at >= parts.length) return controller.close();
      controller.enqueue(parts[at++]!);
    },
  });
}

/** NDJSON of about `bytes` bytes in lines of about 1 KB. */
function bigNdjson(bytes: number): Uint8Array {
  const lines: string[] = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const line = `${JSON.stringify({ id: i, pad: "x".repeat(1000), city: "Zürich" })}\n`;
    lines.push(line);
    size += encode(line).length;
  }
  return encode(lines.join(""));
}

const csvFile = 'id,name,note\n1,Ada Lovelace,"first\nprogrammer"\n2,Émilie du Châtelet,"translated ""Principia"""\n\n3,李白,🌙\r\n';

describe("POST /v1/uploads", () => {
  it("stores a CSV file byte for byte and answers its rows, bytes and columns (quoted newlines, blank lines, UTF-8)", async () => {
    const { status, body } = await upload(csvFile, CSV);
    expect(status).toBe(201);
    expect(body).toEqual({
      uploadId: expect.stringMatching(/^up_[0-9a-f]{32}$/),
      rows: 3,
      bytes: encode(csvFile).length,
      columns: ["id", "name", "note"],
      format: "csv",
      sha256: await sha256Hex(csvFile),
      status: "ready",
      createdAt: expect.any(String),
    });
    expect(new TextDecoder().decode(await storedBytes(body.uploadId))).toBe(csvFile);
    expect(await apiJson(`/v1/uploads/${body.uploadId}`)).toEqual({ status: 200, body });
  });

  it("stores an NDJSON file and gathers its field names", async () => {
    const file = '{"id":1,"name":"Ada"}\n{"id":2,"email":"e@example.com","tags":["ü"]}\r\n\n{"name":"Grace"}';
    const { status, body } = await upload(file, `${NDJSON}; charset=utf-8`);
    expect(status).toBe(201);
    expect(body).toMatchObject({ rows: 3, bytes: encode(file).length, columns: ["id", "name", "email", "tags"], format: "ndjson" });
  });

  it("stores a body streamed without a Content-Length, in parts as it arrives", async () => {
    const file = bigNdjson(MIN_PART_BYTES + 300_000);
    const { status, body } = await upload(streamOf(file), NDJSON);
    expect(status).toBe(201);
    expect(body).toMatchObject({ bytes: file.length, rows: file.filter((b) => b === 10).length, columns: ["id", "pad", "city"] });
    expect(await sha256(await storedBytes(body.uploadId))).toBe(await sha256(file));
  });

  it("refuses a malformed file naming its line, and stores nothing of it", async () => {
    const before = await bucketKeys();
    const cases: Array<[BodyInit | (() => BodyInit), string, number, RegExp]> = [
      ["a,b\n1,2\n3,4\n\n5,6,7\n", CSV, 5, /line 5: this row has 3 fields, the header \(line 1\) has 2 columns/],
      ['a,b\n1,"open\nquote\n', CSV, 2, /never closed/],
      ["", CSV, 1, /empty/],
      ['{"a":1}\n{"a":2\n', NDJSON, 2, /line 2: this line is not valid JSON/],
      ['{"a":1}\n\n["not","an","object"]\n', NDJSON, 3, /line 3: each line must be a JSON object; this one is an array/],
      // Each line fits, but the upload's record would keep every distinct name: three of 30,000 characters are too many.
      [[0, 1, 2].map((i) => `{"${String(i).repeat(30_000)}":0}\n`).join(""), NDJSON, 3, /past 65536 characters together/],
      // Streamed without a length: refused the same way, its parts aborted.
      [() => streamOf(encode(`id\n${"1\n".repeat(50_000)}1,2\n`), 1000), CSV, 50_002, /line 50002: this row has 2 fields/],
    ];
    for (const [file, type, line, message] of cases) {
      const { status, body } = await upload(typeof file === "function" ? file() : file, type);
      expect(status, String(message)).toBe(400);
      expect(body.error).toMatchObject({ code: "malformed_upload", message: expect.stringMatching(message), details: { line } });
    }
    expect(await bucketKeys()).toEqual(before);
  });

  it("refuses a CSV row of empty fields past the row limit however few characters its fields hold, and stores nothing of it", async () => {
    const before = await bucketKeys();
    // csv-parse counts a record's field characters: a megabyte of delimiters holds none, and a million empty fields.
    const fields = 1024 * 1024;
    const cases: Array<[string, number]> = [
      [`a,b\n1,2\n${",".repeat(fields)}\n3,4\n`, 3],
      [`a,b\n\n\n${'"",'.repeat(fields / 3)}`, 4],
      [`${",".repeat(fields)}\n1,2\n`, 1],
    ];
    for (const [file, line] of cases) {
      const { status, body } = await upload(file, CSV);
      expect(status).toBe(400);
      expect(body.error).toMatchObject({
        code: "malformed_upload",
        message: `line ${line}: this row is longer than ${MAX_ROW_LINE_BYTES} bytes, the most one row may hold`,
        details: { line },
      });
    }
    expect(await bucketKeys()).toEqual(before);
  });

  it("refuses a row within the row limit as written but past it as JSON, as the same rows in hand are refused", async () => {
    const before = await bucketKeys();
    // A control character is one byte in the file and six in JSON (\u0001); 1e20 is four, and 21 as JSON writes it.
    const control = "\u0001".repeat(20_000);
    const cases: Array<[string, string, number]> = [
      [`id,name,domain,note\r\n1,a,b,c\r\n2,a,b,"x\r\ny"\r\n3,a,b,${control}\r\n`, CSV, 5],
      [`{"id":"1"}\n\n{"id":"2","n":[${Array(10_000).fill("1e20").join(",")}]}\n`, NDJSON, 3],
    ];
    for (const [file, type, line] of cases) {
      expect(encode(file).length, type).toBeLessThan(MAX_ROW_LINE_BYTES);
      const { status, body } = await upload(file, type);
      expect(status, type).toBe(400);
      expect(body.error, type).toMatchObject({
        code: "malformed_upload",
        message: expect.stringMatching(new RegExp(`^line ${line}: this row is \\d+ bytes as JSON.* ${MAX_ROW_LINE_BYTES}`)),
        details: { line },
      });
    }
    expect(await bucketKeys()).toEqual(before);
    // The same CSV in hand: refused at submit, naming the row.
    const inHand = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input: { csv: cases[0]![0] } } });
    expect(inHand.status).toBe(400);
    expect(JSON.stringify(inHand.body.error.details)).toContain(`over ${MAX_ROW_LINE_BYTES} bytes`);
  });

  it("takes an NDJSON line of exactly the row limit ending in CRLF, byte-order mark and all, however the chunks fall", async () => {
    const lineOf = (bytes: number) => `{"a":"${"x".repeat(bytes - 8)}"}`;
    const line = lineOf(MAX_ROW_LINE_BYTES);
    expect(encode(line).length).toBe(MAX_ROW_LINE_BYTES);
    const file = `\ufeff${line}\r\n${line}\r\n`;
    // A chunk ending between each line's CR and its LF, the first line's after its byte-order mark too.
    const split = [`\ufeff${line}\r`, `\n${line}\r`, "\n"].map(encode);
    for (const [label, body] of [
      ["chunked as the runtime reads it", file],
      ["split at each CR", streamOfParts(split)],
    ] as const) {
      const stored = await upload(body, NDJSON);
      expect(stored.status, label).toBe(201);
      expect(stored.body).toMatchObject({ rows: 2, bytes: encode(file).length, columns: ["a"] });
    }
    // A byte more is a byte too many, either way.
    const over = lineOf(MAX_ROW_LINE_BYTES + 1);
    for (const body of [`${line}\r\n${over}\r\n`, streamOfParts([`${line}\r`, `\n${over}\r`, "\n"].map(encode))]) {
      const refused = await upload(body, NDJSON);
      expect(refused.status).toBe(400);
      expect(refused.body.error).toMatchObject({ code: "malformed_upload", details: { line: 2 } });
    }
  });

  it("refuses a content type other than CSV and NDJSON, a charset other than UTF-8, and a body over 95 MB", async () => {
    for (const type of ["application/json", "text/plain", "text/csv; charset=latin1"]) {
      const { status, body } = await upload("a,b\n1,2\n", type);
      expect(status, type).toBe(400);
      expect(body.error.code).toBe("unsupported_content_type");
    }
    const res = await api("/v1/uploads", { method: "POST", body: "a,b\n1,2\n" });
    expect(res.status).toBe(400);
    const before = await bucketKeys();
    const big = await upload(streamOf(encode("a\n")), CSV, { headers: { "Content-Length": "95000001" } });
    expect(big.status).toBe(413);
    expect(big.body.error).toMatchObject({ code: "upload_too_large", message: expect.stringContaining("multipart") });
    expect(await bucketKeys()).toEqual(before);
  });
});

describe("uploads belong to their org", () => {
  it("shows another org's upload as not found, and accepts none of its parts", async () => {
    const { body: ready } = await upload(csvFile, CSV);
    const { body: started } = await apiJson("/v1/uploads?multipart=1", { method: "POST", headers: { "Content-Type": CSV } });
    for (const [method, path, body] of [
      ["GET", `/v1/uploads/${ready.uploadId}`],
      ["GET", `/v1/uploads/${started.uploadId}`],
      ["PUT", `/v1/uploads/${started.uploadId}/parts/1`, "a\n1\n"],
      ["POST", `/v1/uploads/${started.uploadId}/complete`],
      ["GET", "/v1/uploads/up_00000000000000000000000000000000"],
      ["GET", "/v1/uploads/nonsense"],
      ["DELETE", `/v1/uploads/${ready.uploadId}`],
      ["DELETE", `/v1/uploads/${started.uploadId}`],
    ] as const) {
      const res = await apiJson(path, { method, body, token: "other-token" });
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.body.error.code).toBe("upload_not_found");
    }
    expect((await apiJson(`/v1/uploads/${ready.uploadId}`)).status).toBe(200);
  });
});

describe("DELETE /v1/uploads/<id>", () => {
  it("removes a ready upload and one still receiving parts, leaving nothing of either in the bucket", async () => {
    const { body: ready } = await upload(csvFile, CSV);
    const { body: started } = await apiJson("/v1/uploads?multipart=1", { method: "POST", headers: { "Content-Type": CSV } });
    expect((await apiJson(`/v1/uploads/${started.uploadId}/parts/1`, { method: "PUT", body: "a,b\n1,2\n" })).status).toBe(200);
    for (const uploadId of [ready.uploadId, started.uploadId]) {
      expect((await bucketKeys()).some((key) => key.includes(uploadId))).toBe(true);
      const removed = await apiJson(`/v1/uploads/${uploadId}`, { method: "DELETE" });
      expect(removed).toEqual({ status: 200, body: { uploadId, deleted: true } });
      expect((await bucketKeys()).filter((key) => key.includes(uploadId))).toEqual([]);
      expect((await apiJson(`/v1/uploads/${uploadId}`)).status).toBe(404);
      expect((await apiJson(`/v1/uploads/${uploadId}`, { method: "DELETE" })).body.error.code).toBe("upload_not_found");
    }
    // Parts sent after the delete find no upload to join.
    const late = await apiJson(`/v1/uploads/${started.uploadId}/parts/2`, { method: "PUT", body: "3,4\n" });
    expect(late.status).toBe(404);
  });
});

describe("multipart uploads", () => {
  const start = async (type = CSV) => {
    const { status, body } = await apiJson("/v1/uploads?multipart=1", { method: "POST", headers: { "Content-Type": type } });
    expect(status).toBe(201);
    expect(body).toEqual({ uploadId: expect.stringMatching(/^up_[0-9a-f]{32}$/) });
    return body.uploadId as string;
  };
  const put = (uploadId: string, part: number, bytes: BodyInit) =>
    apiJson(`/v1/uploads/${uploadId}/parts/${part}`, { method: "PUT", body: bytes });
  const complete = (uploadId: string) => apiJson(`/v1/uploads/${uploadId}/complete`, { method: "POST" });

  it("joins a 5 MiB part and a smaller last one into one file, parsed across the boundary", async () => {
    const file = bigNdjson(MIN_PART_BYTES + 200_000);
    const uploadId = await start(NDJSON);
    expect((await apiJson(`/v1/uploads/${uploadId}`)).body).toEqual({
      uploadId,
      status: "receiving",
      format: "ndjson",
      createdAt: expect.any(String),
    });
    // The second part is sent first: parts may arrive in any order. The cut falls inside a line.
    expect(await put(uploadId, 2, file.slice(MIN_PART_BYTES))).toEqual({
      status: 200,
      body: { part: 2, bytes: file.length - MIN_PART_BYTES },
    });
    expect(await put(uploadId, 1, file.slice(0, MIN_PART_BYTES))).toEqual({ status: 200, body: { part: 1, bytes: MIN_PART_BYTES } });
    const done = await complete(uploadId);
    expect(done.status).toBe(201);
    expect(done.body).toMatchObject({
      uploadId,
      rows: file.filter((b) => b === 10).length,
      bytes: file.length,
      format: "ndjson",
      status: "ready",
    });
    expect(await sha256(await storedBytes(uploadId))).toBe(await sha256(file));
    // Only the file, its index and its record remain; completing again answers the same.
    expect((await bucketKeys()).filter((k) => k.includes(uploadId))).toEqual([
      `dev/${uploadId}/data`,
      `dev/${uploadId}/index`,
      `dev/${uploadId}/upload`,
    ]);
    expect(await complete(uploadId)).toEqual(done);
    const late = await put(uploadId, 3, "x");
    expect(late.status).toBe(409);
    expect(late.body.error.code).toBe("upload_complete");
  });

  it("refuses a part under 5 MiB that is not the last, and a missing part, until they are sent right", async () => {
    const uploadId = await start(CSV);
    await put(uploadId, 1, "id,note\n1,");
    await put(uploadId, 3, '"x"\n');
    const missing = await complete(uploadId);
    expect(missing.status).toBe(400);
    expect(missing.body.error).toMatchObject({ code: "upload_parts_missing", message: expect.stringContaining("part 2 is missing") });
    await put(uploadId, 2, "a\n2,b\n3,");
    const small = await complete(uploadId);
    expect(small.status).toBe(400);
    expect(small.body.error).toMatchObject({ code: "upload_part_too_small", details: { part: 1, bytes: 10, minBytes: MIN_PART_BYTES } });
    expect((await apiJson(`/v1/uploads/${uploadId}`)).body.status).toBe("receiving");
  });

  it("completes an upload whose parts R2 had joined when the complete before died, checking the file then", async () => {
    const uploadId = await start(CSV);
    await put(uploadId, 1, "id,note\n1,a\n2,b\n");
    // A complete got as far as R2 joining the parts, then died (past its CPU limit while it checked the file, say).
    const record = JSON.parse(await (await env.UPLOADS.get(`dev/${uploadId}/multipart`))!.text());
    const marker = await env.UPLOADS.head(`dev/${uploadId}/parts/1`);
    await env.UPLOADS.resumeMultipartUpload(`dev/${uploadId}/data`, record.r2UploadId).complete([
      { partNumber: 1, etag: marker!.customMetadata!.etag! },
    ]);
    const done = await complete(uploadId);
    expect(done).toEqual({ status: 201, body: expect.objectContaining({ uploadId, rows: 2, status: "ready" }) });
    expect((await bucketKeys()).filter((k) => k.includes(uploadId))).toEqual([
      `dev/${uploadId}/data`,
      `dev/${uploadId}/index`,
      `dev/${uploadId}/upload`,
    ]);
  });

  it("answers every one of concurrent completes with the upload, and a part sent once R2 joined the parts 409", async () => {
    const uploadId = await start(CSV);
    await put(uploadId, 1, "id,note\n1,a\n2,b\n");
    const answers = await Promise.all(Array.from({ length: 4 }, () => complete(uploadId)));
    for (const answer of answers)
      expect(answer).toEqual({ status: 201, body: expect.objectContaining({ uploadId, rows: 2, status: "ready" }) });
    expect((await bucketKeys()).filter((k) => k.includes(uploadId))).toEqual([
      `dev/${uploadId}/data`,
      `dev/${uploadId}/index`,
      `dev/${uploadId}/upload`,
    ]);

    // A part sent while a complete checks the joined file (R2 has joined the parts: it takes no more).
    const joining = await start(CSV);
    await put(joining, 1, "id,note\n1,a\n");
    const record = JSON.parse(await (await env.UPLOADS.get(`dev/${joining}/multipart`))!.text());
    const marker = await env.UPLOADS.head(`dev/${joining}/parts/1`);
    await env.UPLOADS.resumeMultipartUpload(`dev/${joining}/data`, record.r2UploadId).complete([
      { partNumber: 1, etag: marker!.customMetadata!.etag! },
    ]);
    const late = await put(joining, 2, "3,c\n");
    expect(late.status).toBe(409);
    expect(late.body.error.code).toBe("upload_complete");
    expect((await complete(joining)).body).toMatchObject({ rows: 1, status: "ready" });
  });

  it("answers 404 for a part or a complete of an upload R2 has aborted (unfinished after a week), and forgets it", async () => {
    for (const step of ["part", "complete"] as const) {
      const uploadId = await start(CSV);
      await put(uploadId, 1, "id,note\n1,a\n");
      // R2 aborts a multipart upload left unfinished for seven days.
      const record = JSON.parse(await (await env.UPLOADS.get(`dev/${uploadId}/multipart`))!.text());
      await env.UPLOADS.resumeMultipartUpload(`dev/${uploadId}/data`, record.r2UploadId).abort();
      const answer = step === "part" ? await put(uploadId, 2, "2,b\n") : await complete(uploadId);
      expect(answer.status, step).toBe(404);
      expect(answer.body.error).toMatchObject({ code: "upload_not_found", message: expect.stringContaining("start again") });
      expect((await apiJson(`/v1/uploads/${uploadId}`)).status, step).toBe(404);
      expect(
        (await bucketKeys()).filter((k) => k.includes(uploadId)),
        step,
      ).toEqual([]);
    }
  });

  it("deletes a file found malformed at complete, with its parts, and says which line", async () => {
    const uploadId = await start(CSV);
    await put(uploadId, 1, 'id,note\n1,"two\nlines"\n2\n');
    const { status, body } = await complete(uploadId);
    expect(status).toBe(400);
    expect(body.error).toMatchObject({ code: "malformed_upload", details: { line: 4 } });
    expect((await bucketKeys()).filter((k) => k.includes(uploadId))).toEqual([]);
    expect((await apiJson(`/v1/uploads/${uploadId}`)).status).toBe(404);
  });

  it("refuses a part without a Content-Length and part numbers outside 1 to 10000", async () => {
    const uploadId = await start(CSV);
    const unsized = await put(uploadId, 1, streamOf(encode("a\n1\n")));
    expect(unsized.status).toBe(411);
    expect(unsized.body.error.code).toBe("length_required");
    for (const part of ["0", "10001", "x"]) {
      const res = await apiJson(`/v1/uploads/${uploadId}/parts/${part}`, { method: "PUT", body: "a" });
      expect(res.status, part).toBe(400);
      expect(res.body.error.code).toBe("invalid_part_number");
    }
  });
});

describe("reading an upload's rows by byte range", () => {
  it("returns exactly the rows a parse of the whole file gives, across indexed positions, quoted newlines and UTF-8", async () => {
    const notes = ["plain", "two\nlines", 'say ""hi""', "日本語 🎉", "crlf\r\ninside"];
    let file = "id,name,note\r\n";
    for (let i = 0; i < 2_600; i++) file += `${i},Zoë ${i},"${notes[i % notes.length]}"\r\n${i % 250 === 7 ? "\r\n" : ""}`;
    const { status, body } = await upload(file, CSV);
    expect(status).toBe(201);
    expect(body.rows).toBe(2_600);
    const whole = parse(file, { columns: true, skip_empty_lines: true }) as Record<string, string>[];
    const opened = await new Uploads({ bucket: env.UPLOADS, org: "dev" }).open(body.uploadId);
    // Every 100th row's position: rows 0, 100, ..., 2,500.
    expect(opened!.index.positions).toHaveLength(26);
    expect(opened!.index.every).toBe(100);
    for (const [from, to] of [
      [0, 1],
      [0, 2_600],
      [995, 1_005],
      [1_000, 2_000],
      [1_999, 2_001],
      [2_599, 2_600],
      [1_234, 1_234],
    ] as const) {
      const rows = await readRows(opened!.source, opened!.index, { from, to });
      expect(
        rows.map((r) => r.row),
        `rows [${from}, ${to})`,
      ).toEqual(whole.slice(from, to));
      expect(rows.map((r) => r.index)).toEqual(whole.slice(from, to).map((_, i) => from + i));
    }
    // Row 1 starts on line 3 (row 0 holds a quoted newline); the index's own lines agree with where rows start.
    const [first, second] = await readRows(opened!.source, opened!.index, { from: 0, to: 2 });
    expect([first!.line, second!.line]).toEqual([2, 3]);
    expect(await new Uploads({ bucket: env.UPLOADS, org: "other" }).open(body.uploadId)).toBeNull();
  });
});
