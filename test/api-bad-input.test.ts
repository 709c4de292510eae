/**
 * Bad input to every route of the HTTP API: each is a 4xx in the documented
 * error shape (never a 5xx, never a hang), and creates nothing (no run, no
 * upload, no key in the bucket).
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { api, apiJson } from "./helpers";

const RUN = "run_0123456789abcdef0123456789abcdef";
const UPLOAD = "up_0123456789abcdef0123456789abcdef";
const CSV = "text/csv";
const NDJSON = "application/x-ndjson";

function expectError(body: any, code: string) {
  expect(body).toEqual({ error: expect.objectContaining({ code, message: expect.any(String) }) });
}

/** The org's run ids, every one of them (the file's runs stay well under a page). */
async function runIds(): Promise<string[]> {
  const { status, body } = await apiJson("/v1/runs?limit=200");
  expect(status).toBe(200);
  return body.runs.map((r: { runId: string }) => r.runId);
}

async function bucketKeys(): Promise<string[]> {
  return (await env.UPLOADS.list()).objects.map((o) => o.key).sort();
}

/** POST `text` as a JSON body, byte for byte (`JSON.stringify` cannot write `1e400`, `-0` or a number past 2^53). */
const postRaw = (path: string, text: string, headers: Record<string, string> = {}) =>
  apiJson(path, { method: "POST", body: text, headers: { "Content-Type": "application/json", ...headers } });

/** A CSV of `rows` rows under a header of `columns` long column names besides id, name and domain: small as text, large as rows. */
function wideCsv(rows: number, columns: number, nameChars: number): string {
  const names = Array.from({ length: columns }, (_, i) => `c${i}_${"n".repeat(nameChars)}`);
  const lines = Array.from({ length: rows }, (_, i) => `${i},a,b${",".repeat(columns)}`);
  return `id,name,domain,${names.join(",")}\n${lines.join("\n")}\n`;
}

describe("a run's input", () => {
  it("refuses a field named __proto__, which the stored row lost without a word (rows in hand, CSV in hand)", async () => {
    const before = await runIds();
    const rows = '[{"id":"a","name":"A","domain":"d.test"},{"id":"b","name":"B","domain":"d.test","__proto__":{"x":1}}]';
    const inputs: [string, string][] = [
      [`{"rows":${rows}}`, "input.rows.1.__proto__"],
      [JSON.stringify({ csv: "id,name,domain,__proto__\nb,B,d.test,1\n" }), "input.csv"],
    ];
    for (const [input, path] of inputs) {
      const { status, body } = await postRaw("/v1/runs", `{"play":"demo-enrich","input":${input}}`);
      expect(status, path).toBe(400);
      expectError(body, "invalid_request");
      expect(body.error.details, path).toEqual([{ path, message: expect.stringContaining('"__proto__"') }]);
    }
    expect(await runIds()).toEqual(before);
  });

  it("refuses a key given twice in one object, whose first value JSON dropped without a word (rows, a signal, an NDJSON line)", async () => {
    const [runsBefore, keysBefore] = [await runIds(), await bucketKeys()];
    const rows = '[{"id":"a","name":"A","domain":"d.test"},{"id":"b","name":"B","domain":"d.test","id":"c"}]';
    const run = await postRaw("/v1/runs", `{"play":"demo-enrich","input":{"rows":${rows}}}`);
    expect(run.status).toBe(400);
    expectError(run.body, "invalid_request");
    expect(run.body.error.details).toEqual([{ path: "input.rows.1.id", message: "a key given twice in one object" }]);
    expect(run.body.error.message).toMatch(/^input\.rows\.1\.id: the key "id" is given twice/);
    const signal = await postRaw(`/v1/runs/${RUN}/signals/approve`, '{"data":{"ok":true,"ok":false}}');
    expect(signal.status).toBe(400);
    expect(signal.body.error).toMatchObject({ code: "invalid_request", details: [{ path: "data.ok" }] });
    const file = '{"id":"1","name":"a","domain":"b"}\n{"id":"2","name":"a","domain":"b","name":"c"}\n';
    const upload = await apiJson("/v1/uploads", { method: "POST", body: file, headers: { "Content-Type": NDJSON } });
    expect(upload.status).toBe(400);
    expect(upload.body.error).toMatchObject({
      code: "malformed_upload",
      details: { line: 2, reason: expect.stringMatching(/^the field "name" is given twice/) },
    });
    expect(await runIds()).toEqual(runsBefore);
    expect(await bucketKeys()).toEqual(keysBefore);
  });

  it("refuses a numeric row id past 2^53, whose last digits JSON loses (two such ids were one row, the other dropped)", async () => {
    const before = await runIds();
    const body = (ids: string) =>
      `{"play":"demo-enrich","input":{"rows":[${ids
        .split(",")
        .map((id, i) => `{"id":${id},"name":"P ${i}","domain":"big.test"}`)
        .join(",")}]}}`;
    for (const path of ["/v1/runs", "/v1/runs/estimate"]) {
      const { status, body: answer } = await postRaw(path, body("12345678901234567890,12345678901234567891"));
      expect(status, path).toBe(400);
      expectError(answer, "invalid_request");
      expect(answer.error.details).toEqual([
        { path: "input.rows.0.id", message: expect.stringContaining("as a string") },
        { path: "input.rows.1.id", message: expect.stringContaining("as a string") },
      ]);
    }
    // The largest safe integer, and a fraction, are ids as before.
    expect((await postRaw("/v1/runs/estimate", body("9007199254740991,-9007199254740991,1.5"))).status).toBe(200);
    expect(await runIds()).toEqual(before);
  });

  it("refuses CSV text whose rows are too large for a run once parsed (400 KB of CSV were 82 MB of rows, a 500)", async () => {
    const before = await runIds();
    // Each row repeats the header's ten 400-character names: 4 KB a row from 13 bytes of commas.
    const csv = wideCsv(20_000, 10, 400);
    expect(csv.length).toBeLessThan(400_000);
    for (const path of ["/v1/runs", "/v1/runs/estimate"]) {
      const { status, body } = await apiJson(path, { method: "POST", json: { play: "demo-enrich", input: { csv } } });
      expect(status, path).toBe(400);
      expectError(body, "invalid_request");
      expect(body.error.details).toEqual([{ path: "input.csv", message: expect.stringMatching(/as JSON.*POST \/v1\/uploads/) }]);
    }
    expect(await runIds()).toEqual(before);
  });

  it("refuses an input that breaks its schema in too many places, listing the first (a stack overflow, a 500)", async () => {
    const before = await runIds();
    // 300,000 issues: zod gathered them into one array, spread as arguments.
    const accounts = Array.from({ length: 300 }, (_, i) => ({ id: String(i), domain: "d.test", people: Array(1000).fill(0) }));
    for (const path of ["/v1/runs", "/v1/runs/estimate"]) {
      const { status, body } = await apiJson(path, { method: "POST", json: { play: "demo-accounts", input: { accounts } } });
      expect(status, path).toBe(400);
      expectError(body, "invalid_request");
      expect(body.error.details).toHaveLength(101);
      expect(body.error.details[0]).toEqual({ path: "input.accounts.0.people.0", message: expect.stringContaining("expected string") });
      expect(body.error.details[100]).toEqual({ path: "input", message: "and more issues, not looked for" });
    }
    expect(await runIds()).toEqual(before);
  });

  it("refuses 16 MB of millions of wrong items listing the first, and takes a large input that fits (the issues were gigabytes)", async () => {
    const before = await runIds();
    const accounts = (count: number, person: string) =>
      `[${Array.from({ length: count }, (_, i) => `{"id":"${i}","domain":"d.test","people":[${`${person},`.repeat(999)}${person}]}`).join(",")}]`;
    // Each person a wrong type (0: 7,900,000 of them), or a string its check refuses ("": 5,400,000): zod made an issue
    // of each, 3 GB in all, where an answer lists 100.
    for (const [person, count, message] of [
      ["0", 7_900, "expected string"],
      ['""', 5_400, ">=1 characters"],
    ] as const) {
      const text = `{"play":"demo-accounts","input":{"accounts":${accounts(count, person)}}}`;
      const { status, body } = await postRaw("/v1/runs", text);
      expect(status, person).toBe(400);
      expectError(body, "invalid_request");
      expect(body.error.details[0], person).toEqual({ path: "input.accounts.0.people.0", message: expect.stringContaining(message) });
      expect(body.error.details.at(-1)).toEqual({ path: "input", message: "and more issues, not looked for" });
    }
    // 80,000 people that fit are checked in parts, then whole: the estimate reads them all.
    const fits = await postRaw("/v1/runs/estimate", `{"play":"demo-accounts","input":{"accounts":${accounts(80, '"Ann Lee"')}}}`);
    expect(fits.status, JSON.stringify(fits.body).slice(0, 500)).toBe(200);
    expect(await runIds()).toEqual(before);
  });

  it("refuses a body of 8,000,000 items with 400 (its nesting check held a path per item: 3 GB, and the runtime crashed)", async () => {
    const before = await runIds();
    const people = `[${"0,".repeat(7_999_999)}0]`;
    const text = `{"play":"demo-accounts","input":{"accounts":[{"id":"1","domain":"d.test","people":${people}}]}}`;
    const { status, body } = await postRaw("/v1/runs", text);
    expect(status).toBe(400);
    expectError(body, "invalid_request");
    expect(body.error.details).toEqual([{ path: "input.accounts.0.people", message: expect.stringContaining("1000") }]);
    expect(await runIds()).toEqual(before);
  });

  it("refuses a number past a double's range, which was stored as null (in a row, a signal's data, an NDJSON line)", async () => {
    const [runsBefore, keysBefore] = [await runIds(), await bucketKeys()];
    const row = await postRaw("/v1/runs", '{"play":"demo-enrich","input":{"rows":[{"id":"1","name":"a","domain":"b","score":1e400}]}}');
    expect(row.status).toBe(400);
    expect(row.body.error).toMatchObject({ code: "invalid_request", details: [{ path: "input.rows.0.score" }] });
    const signal = await postRaw(`/v1/runs/${RUN}/signals/approve`, '{"data":{"n":-1e999}}');
    expect(signal.status).toBe(400);
    expect(signal.body.error).toMatchObject({ code: "invalid_request", details: [{ path: "data.n" }] });
    const file = `{"id":"1","name":"a","domain":"b"}\n{"id":"2","name":"a","domain":"b","score":${"9".repeat(400)}}\n`;
    const upload = await apiJson("/v1/uploads", { method: "POST", body: file, headers: { "Content-Type": NDJSON } });
    expect(upload.status).toBe(400);
    expect(upload.body.error).toMatchObject({
      code: "malformed_upload",
      details: { line: 2, reason: expect.stringMatching(/^score: a number past/) },
    });
    expect(await runIds()).toEqual(runsBefore);
    expect(await bucketKeys()).toEqual(keysBefore);
  });

  it("refuses rows too large to hand to the run once parsed with 413 (11 MB of -0 were 33 MB, past the 32 MiB of an RPC: a 500)", async () => {
    const before = await runIds();
    // `-0` is 2 characters of JSON and 9 bytes as a JavaScript value (a double); 178 rows of 63 KB each.
    const row = (i: number) => `{"id":"${i}","name":"P","domain":"d.test","x":[${"-0,".repeat(20_999)}-0]}`;
    const text = `{"play":"demo-enrich","input":{"rows":[${Array.from({ length: 178 }, (_, i) => row(i)).join(",")}]}}`;
    const { status, body } = await postRaw("/v1/runs", text);
    expect(status).toBe(413);
    expectError(body, "request_too_large");
    expect(await runIds()).toEqual(before);
  });

  it("leaves the Idempotency-Key of a request refused for its size free: a retry with smaller rows and that key starts its run", async () => {
    const key = `too-large-${crypto.randomUUID()}`;
    const row = (i: number) => `{"id":"${i}","name":"P","domain":"d.test","x":[${"-0,".repeat(20_999)}-0]}`;
    const large = `{"play":"demo-enrich","input":{"rows":[${Array.from({ length: 178 }, (_, i) => row(i)).join(",")}]}}`;
    const huge = `{"play":"demo-enrich","input":{"rows":[{"id":"1","name":"${"n".repeat(17 * 1024 * 1024)}","domain":"d.test"}]}}`;
    for (const text of [large, huge]) {
      const refused = await postRaw("/v1/runs", text, { "Idempotency-Key": key });
      expect(refused.status).toBe(413);
      expectError(refused.body, "request_too_large");
    }
    const small = '{"play":"demo-enrich","input":{"rows":[{"id":"1","name":"P","domain":"d.test"}]}}';
    const started = await postRaw("/v1/runs", small, { "Idempotency-Key": key });
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    // The key now stands for that run: sent again, it answers the same run; with the large rows, it is another request.
    const again = await postRaw("/v1/runs", small, { "Idempotency-Key": key });
    expect(again.body.runId).toBe(started.body.runId);
    expect((await postRaw("/v1/runs", large, { "Idempotency-Key": key })).status).toBe(409);
  });
});

describe("every route", () => {
  const json = (value: unknown) => ({ method: "POST", body: JSON.stringify(value), headers: { "Content-Type": "application/json" } });
  const put = (body: string) => ({ method: "PUT", body, headers: { "Content-Type": "application/json" } });
  const lead = { id: "1", name: "Ada", domain: "a.test" };
  const cases: [string, string, RequestInit, number, string][] = [
    // Bodies: not JSON, not an object, wrong types, unknown fields, out of range.
    ["a body that is not JSON", "/v1/runs", { method: "POST", body: "{nope" }, 400, "invalid_request"],
    ["an empty body", "/v1/runs", { method: "POST", body: "" }, 400, "invalid_request"],
    ["a body that is an array", "/v1/runs", json([]), 400, "invalid_request"],
    ["an unknown field", "/v1/runs", json({ play: "demo-enrich", input: { rows: [lead] }, extra: 1 }), 400, "invalid_request"],
    [
      "Infinity as timeoutSeconds",
      "/v1/runs",
      { method: "POST", body: '{"play":"demo-enrich","input":{"rows":[]},"timeoutSeconds":1e400}' },
      400,
      "invalid_request",
    ],
    ["a negative maxSpend", "/v1/runs", json({ play: "demo-enrich", input: { rows: [lead] }, maxSpend: -1 }), 400, "invalid_request"],
    ["a play name of 100,000 characters", "/v1/runs", json({ play: "x".repeat(100_000), input: {} }), 400, "invalid_request"],
    ["a play named __proto__", "/v1/runs", json({ play: "__proto__", input: {} }), 404, "unknown_play"],
    ["a ragged CSV", "/v1/runs", json({ play: "demo-enrich", input: { csv: "id,name,domain\n1,a\n" } }), 400, "invalid_request"],
    [
      "a CSV naming a column twice",
      "/v1/runs",
      json({ play: "demo-enrich", input: { csv: "id,id,name,domain\n1,1,a,b\n" } }),
      400,
      "invalid_request",
    ],
    ["a CSV naming no column", "/v1/runs", json({ play: "demo-enrich", input: { csv: ",,\n1,a,b\n" } }), 400, "invalid_request"],
    ["an upload id never given out", "/v1/runs", json({ play: "demo-enrich", input: { upload: UPLOAD } }), 404, "upload_not_found"],
    [
      "an Idempotency-Key of 201 characters",
      "/v1/runs",
      { ...json({ play: "demo-enrich", input: { rows: [lead] } }), headers: { "Idempotency-Key": "k".repeat(201) } },
      400,
      "invalid_request",
    ],
    ["a rerun of a run id with odd characters", "/v1/runs/..%2Frun_x/rerun", json({}), 404, "run_not_found"],
    ["a rerun body with an unknown field", `/v1/runs/${RUN}/rerun`, json({ force: true, x: 1 }), 400, "invalid_request"],
    ["a signal without data", `/v1/runs/${RUN}/signals/approve`, json({}), 400, "invalid_request"],
    ["a signal to an event key with a space", `/v1/runs/${RUN}/signals/a%20b`, json({ data: 1 }), 400, "invalid_request"],
    ["a signal of 70 KB", `/v1/runs/${RUN}/signals/approve`, json({ data: "x".repeat(70_000) }), 400, "invalid_request"],
    ["a daily limit of Infinity", "/v1/spend/limits", put('{"dailyCredits":1e400}'), 400, "invalid_request"],
    ["a daily limit as a string", "/v1/spend/limits", put('{"dailyCredits":"5"}'), 400, "invalid_request"],
    ["a pacing rate below 0.01", "/v1/pacing/sim", put('{"requestsPerSecond":0}'), 400, "invalid_request"],
    // Read as JSON.parse reads it, the last (5) was set without a word.
    [
      "a pacing override giving a key twice",
      "/v1/pacing/sim",
      put('{"requestsPerSecond":0,"requestsPerSecond":5}'),
      400,
      "invalid_request",
    ],
    ["a pacing provider of 70 characters", `/v1/pacing/${"p".repeat(70)}`, put("{}"), 400, "invalid_request"],
    ["a body over 16 MiB", "/v1/spend/limits", put("x".repeat(17 * 1024 * 1024)), 413, "request_too_large"],
    // Query parameters: cursors, limits, offsets.
    ["a limit that is not a number", "/v1/runs?limit=abc", {}, 400, "invalid_request"],
    ["a limit of Infinity", "/v1/runs?limit=1e400", {}, 400, "invalid_request"],
    ["a list cursor never given out", "/v1/runs?cursor=bm9wZQ", {}, 400, "invalid_request"],
    ["an events after past 2^53", `/v1/runs/${RUN}/events?after=99999999999999999999`, {}, 400, "invalid_request"],
    ["an events limit of 1.5", `/v1/runs/${RUN}/events?limit=1.5`, {}, 400, "invalid_request"],
    ["a negative live after", `/v1/runs/${RUN}/live?after=-1`, {}, 400, "invalid_request"],
    ["a dataset offset past 2^53", `/v1/runs/${RUN}/datasets/leads?offset=1e300`, {}, 400, "invalid_request"],
    ["a dataset format of xml", `/v1/runs/${RUN}/datasets/leads?format=xml`, {}, 400, "invalid_request"],
    ["a spend range of two years", "/v1/spend?from=2024-01-01&to=2026-01-01", {}, 400, "invalid_request"],
    // Ids with odd characters or of huge length, and methods no route takes.
    ["a run id of 100,000 characters", `/v1/runs/${"r".repeat(100_000)}`, {}, 404, "run_not_found"],
    ["an upload id with a NUL", "/v1/uploads/up_%00", {}, 404, "upload_not_found"],
    ["a DELETE of a run", `/v1/runs/${RUN}`, { method: "DELETE" }, 404, "not_found"],
    ["a GET of a cancel", `/v1/runs/${RUN}/cancel`, {}, 404, "not_found"],
    // Uploads: content types, and multipart uploads asked for out of turn.
    [
      "an upload as JSON",
      "/v1/uploads",
      { method: "POST", body: "{}", headers: { "Content-Type": "application/json" } },
      400,
      "unsupported_content_type",
    ],
    [
      "an upload in Latin-1",
      "/v1/uploads",
      { method: "POST", body: "id\n1\n", headers: { "Content-Type": "text/csv; charset=latin1" } },
      400,
      "unsupported_content_type",
    ],
    ["a complete of an unknown upload", `/v1/uploads/${UPLOAD}/complete`, { method: "POST" }, 404, "upload_not_found"],
    ["a part of an unknown upload", `/v1/uploads/${UPLOAD}/parts/1`, { method: "PUT", body: "id\n" }, 404, "upload_not_found"],
    ["part 10001", `/v1/uploads/${UPLOAD}/parts/10001`, { method: "PUT", body: "id\n" }, 400, "invalid_part_number"],
    ["part -1", `/v1/uploads/${UPLOAD}/parts/-1`, { method: "PUT", body: "id\n" }, 400, "invalid_part_number"],
  ];
  it("answers each bad request with its 4xx and code, and creates nothing", async () => {
    const [runsBefore, keysBefore] = [await runIds(), await bucketKeys()];
    for (const [label, path, init, status, code] of cases) {
      const { status: got, body } = await apiJson(path, init as Parameters<typeof apiJson>[1]);
      expect(got, label).toBe(status);
      expect(body.error?.code, label).toBe(code);
    }
    expect(await runIds()).toEqual(runsBefore);
    expect(await bucketKeys()).toEqual(keysBefore);
  });

  // A fixed path beside a parameter route is not taken for an id: GET /v1/runs/estimate is no run named "estimate".
  it("answers a wrong method on /v1/runs/estimate saying the route takes POST", async () => {
    for (const method of ["GET", "PUT", "DELETE"]) {
      const { status, body } = await apiJson("/v1/runs/estimate", { method });
      expect(status, method).toBe(404);
      expect(body.error, method).toMatchObject({ code: "not_found", message: expect.stringContaining("takes POST") });
      expect(body.error.message, method).not.toMatch(/no run "estimate"/);
    }
  });

  it("refuses a malformed CSV or NDJSON file naming its line, and keeps nothing of it", async () => {
    const keysBefore = await bucketKeys();
    const files: [string, string, string, RegExp][] = [
      ["empty", "", CSV, /line 1: the file is empty/],
      ["a header named twice", "id,id\n1,2\n", CSV, /names column "id" twice/],
      ["a header naming no column", ",,\n1,2,3\n", CSV, /line 1: the header names no column/],
      ["a ragged row", "\ufeffid,name\r\n1,a\r\n2\r\n", CSV, /line 3: this row has 1 field/],
      ["a quote never closed", 'id,name\n1,"a\n', CSV, /line 2: a quoted field .* never closed/],
      ["an oversized field", `id,name\n1,${"x".repeat(70_000)}\n`, CSV, /line 2: this row is longer than 65536 bytes/],
      ["an NDJSON array", '{"id":1}\n[1]\n', NDJSON, /line 2: each line must be a JSON object/],
      // A field named __proto__ would be taken for a row's prototype and lost from the stored row.
      ["a column named __proto__", "id,__proto__\n1,2\n", CSV, /line 1: the header names a column "__proto__"/],
      [
        "an NDJSON field named __proto__",
        '{"id":1}\n{"id":2,"__proto__":{"a":1}}\n',
        NDJSON,
        /line 2: a field may not be named "__proto__"/,
      ],
    ];
    for (const [label, file, type, message] of files) {
      const { status, body } = await apiJson("/v1/uploads", { method: "POST", body: file, headers: { "Content-Type": type } });
      expect(status, label).toBe(400);
      expect(body.error, label).toMatchObject({ code: "malformed_upload", message: expect.stringMatching(message) });
    }
    expect(await bucketKeys()).toEqual(keysBefore);
  });

  it("checks a multipart upload's parts at complete: none, missing, too small, or sent again", async () => {
    const started = await apiJson("/v1/uploads?multipart=1", { method: "POST", headers: { "Content-Type": CSV } });
    expect(started.status).toBe(201);
    const { uploadId } = started.body;
    const complete = () => apiJson(`/v1/uploads/${uploadId}/complete`, { method: "POST" });
    const part = (n: number, body: string) => apiJson(`/v1/uploads/${uploadId}/parts/${n}`, { method: "PUT", body });
    expect((await complete()).body.error.code).toBe("upload_parts_missing");
    expect((await part(1, "")).body.error.code).toBe("upload_part_empty");
    expect((await part(2, "1,a\n")).status).toBe(200);
    expect((await complete()).body.error).toMatchObject({ code: "upload_parts_missing", details: { missing: 1 } });
    expect((await part(1, "id,")).status).toBe(200);
    expect((await complete()).body.error).toMatchObject({ code: "upload_part_too_small", details: { part: 1 } });
    // Part 1 sent again replaces it: the upload still receives parts, nothing of it ready.
    expect((await part(1, "id,name\n")).status).toBe(200);
    expect((await apiJson(`/v1/uploads/${uploadId}`)).body.status).toBe("receiving");
  });
});
