import { parse } from "csv-parse/sync";
import { describe, expect, it } from "vitest";
import { env } from "cloudflare:workers";
import { sheetShardName } from "../src/clients/shards";
import { MAX_RUN_COLUMNS } from "../src/contracts/shards";
import { api, apiJson, datasetRows, expectedEmail, expectedVerdict, startRun, waitForRun } from "./helpers";

let unique = 0;
/** A prefix no other test (or earlier run of this file) uses: datasets persist across runs by row key. */
const tag = (name: string) => `${name}-${Date.now().toString(36)}-${unique++}`;

async function exportCsv(
  runId: string,
  dataset: string,
  query = "",
): Promise<{ header: string[]; rows: Record<string, string>[]; text: string }> {
  const res = await api(`/v1/runs/${runId}/datasets/${dataset}?format=csv${query}`);
  expect(res.status).toBe(200);
  const text = await res.text();
  const [header, ...cells] = parse(text) as string[][];
  return { header: header!, rows: cells.map((line) => Object.fromEntries(header!.map((col, i) => [col, line[i]!]))), text };
}

/** `levels` objects nested inside one another, as JSON text: 1 is `{}`, 2 is `{"a":{}}`. */
const nestedText = (levels: number) => '{"a":'.repeat(levels - 1) + "{}" + "}".repeat(levels - 1);

function expectInvalid(status: number, body: any, path: string): void {
  expect(status).toBe(400);
  expect(body.error.code).toBe("invalid_request");
  const named = (body.error.details as { path: string }[]).map((d) => d.path);
  expect(
    named.some((n) => n.startsWith(path)),
    `${named} names ${path}`,
  ).toBe(true);
}

describe("CSV export columns", () => {
  it("are the union over the whole dataset: computed fields that first appear after the first 500 rows are exported", async () => {
    const prefix = tag("union");
    // The first 500 rows fail before any field is computed; only the last 100 have email and verdict.
    const rows = Array.from({ length: 600 }, (_, i) => ({
      id: `${prefix}-${i}`,
      name: i < 500 ? `!fail Person ${i}` : `Union Person ${i}`,
      domain: "union.test",
      ...(i === 550 ? { note: "only on row 550" } : {}),
    }));
    const run = await waitForRun(await startRun("demo-enrich", { rows }), { timeoutMs: 120_000 });
    expect(run.result).toEqual({ rows: 100, failed: 500 });

    const { header, rows: exported } = await exportCsv(run.runId, "leads");
    expect(header).toEqual(["id", "name", "domain", "email", "verdict", "note", "_key", "_status", "_error"]);
    expect(exported).toHaveLength(600);
    exported.slice(500).forEach((row, k) => {
      const email = expectedEmail(`Union Person ${500 + k}`, "union.test");
      expect(row).toMatchObject({ _key: `${prefix}-${500 + k}`, _status: "completed", email, verdict: expectedVerdict(email) });
    });
    expect(exported[550]!.note).toBe("only on row 550");
    expect(exported[0]).toMatchObject({ _status: "failed", email: "", verdict: "", note: "" });
  });
});

describe("CSV export columns, found by the shards", () => {
  it("follow the rows in input order, each row's fields as Object.keys lists them, wherever the rows are stored", async () => {
    const prefix = tag("order");
    // Integer-like fields are listed first and in numeric order by Object.keys, whatever order they were written in;
    // fields first met in a later row come after, in that row's order. Rows spread over the dataset's four shards.
    const rows = Array.from({ length: 40 }, (_, i) => ({
      id: `${prefix}-${i}`,
      name: `Order Person ${i}`,
      domain: "order.test",
      ...(i === 0 ? { zeta: 1, "10": "ten", alpha: 2, "2": "two" } : {}),
      ...(i === 7 ? { "7": "seven", beta: 3, "1": "one" } : {}),
      ...(i === 31 ? { gamma: 4, alpha: 5 } : {}),
    }));
    const run = await waitForRun(await startRun("demo-enrich", { rows }), { timeoutMs: 120_000 });
    expect(run.status).toBe("completed");

    // What a reader of every row, in input order, meets first (the export's two-pass way, until it asked the shards).
    const met = new Set<string>();
    for (const row of await datasetRows(run.runId, "leads")) for (const key of Object.keys(row)) if (!key.startsWith("_")) met.add(key);
    const { header, rows: exported } = await exportCsv(run.runId, "leads");
    expect(header).toEqual([...met, "_key", "_status", "_error"]);
    expect(header.slice(0, 9)).toEqual(["2", "10", "id", "name", "domain", "zeta", "alpha", "email", "verdict"]);
    expect(header.slice(9, 13)).toEqual(["1", "7", "beta", "gamma"]);
    expect(exported[7]).toMatchObject({ "1": "one", "7": "seven", beta: "3", "2": "", alpha: "" });
  });

  it("a shard scans its rows in windows: each names the first row of each field it saw, and where the next starts", async () => {
    const prefix = tag("scan");
    const rows = Array.from({ length: 30 }, (_, i) => ({
      id: `${prefix}-${i}`,
      name: `Scan Person ${i}`,
      domain: "scan.test",
      [`only${i}`]: i,
    }));
    const run = await waitForRun(await startRun("demo-enrich", { rows }), { timeoutMs: 120_000 });
    const stored = await datasetRows(run.runId, "leads");
    const shard = env.SHEET_SHARD.getByName(sheetShardName("dev", "demo-enrich", "leads", 0));
    const scanAll = async (window: { limit?: number; maxChars?: number }) => {
      const seen = new Map<string, number>();
      let calls = 0;
      for (let fromIndex: number | null = 0; fromIndex !== null; calls++) {
        const scan = await shard.runColumns({ runId: run.runId, fromIndex, ...window });
        for (const column of scan.columns) if (!seen.has(column.name)) seen.set(column.name, column.index);
        fromIndex = scan.nextIndex;
      }
      return { seen, calls };
    };
    const { seen, calls } = await scanAll({ limit: 2 });
    // The rows shard 0 holds: their own field, first met at their own index; the shared fields at its first row.
    const own = [...seen.keys()].filter((name) => name.startsWith("only"));
    expect(own.length).toBeGreaterThan(1);
    for (const name of own) expect(stored[seen.get(name)!]![name]).toBe(Number(name.slice(4)));
    expect(calls).toBe(Math.ceil(own.length / 2));
    expect(seen.get("id")).toBe(Math.min(...own.map((name) => seen.get(name)!)));
    // A window also ends at its size in characters (here: one row each, as a row is past one character).
    const byChars = await scanAll({ maxChars: 1 });
    expect(byChars.calls).toBe(own.length);
    expect(byChars.seen).toEqual(seen);
  });

  it("never meet a __proto__ column: an upload naming one is refused (rows were stored with it and read without)", async () => {
    const prefix = tag("proto-field");
    // Rows stored before such uploads were refused keep the field, which is not read back: rowFields leaves it out.
    const csv = `id,name,domain,__proto__\n${prefix}-0,Proto Field,proto.test,x\n`;
    const uploaded = await apiJson("/v1/uploads", { method: "POST", body: csv, headers: { "Content-Type": "text/csv" } });
    expect(uploaded.status).toBe(400);
    expect(uploaded.body.error).toMatchObject({ code: "malformed_upload", message: expect.stringContaining('"__proto__"') });
  });

  it(`refuses with 422 an export of more than ${MAX_RUN_COLUMNS} fields in all; its JSON pages still read`, async () => {
    const prefix = tag("wide");
    const perRow = 1_100;
    const rows = Array.from({ length: Math.ceil(MAX_RUN_COLUMNS / perRow) + 1 }, (_, i) => ({
      id: `${prefix}-${i}`,
      name: `Wide Person ${i}`,
      domain: "wide.test",
      ...Object.fromEntries(Array.from({ length: perRow }, (_, j) => [`f${i}x${j}`, j])),
    }));
    const run = await waitForRun(await startRun("demo-enrich", { rows }), { timeoutMs: 120_000 });
    expect(run.status).toBe("completed");
    const res = await api(`/v1/runs/${run.runId}/datasets/leads?format=csv`);
    expect(res.status).toBe(422);
    const body: any = await res.json();
    expect(body.error).toMatchObject({ code: "export_too_wide", details: { maxColumns: MAX_RUN_COLUMNS } });
    expect(body.error.message).toMatch(/too many columns/);
    const page = await apiJson(`/v1/runs/${run.runId}/datasets/leads?limit=2`);
    expect(page.body.rows).toHaveLength(2);
  });
});

describe("cells are read as own properties only", () => {
  it("a row with fields named toString and constructor does not leak Object.prototype into the next row's cells", async () => {
    const prefix = tag("proto");
    const rows: Record<string, string>[] = [
      { id: `${prefix}-0`, name: "Proto One", domain: "proto.test", toString: "ts-value", constructor: "ctor-value" },
      { id: `${prefix}-1`, name: "Proto Two", domain: "proto.test" },
    ];
    const run = await waitForRun(await startRun("demo-enrich", { rows }));
    expect(run.status).toBe("completed");

    const { header, rows: exported, text } = await exportCsv(run.runId, "leads");
    expect(header).toEqual(expect.arrayContaining(["toString", "constructor"]));
    expect(text).not.toContain("native code");
    expect(exported[0]).toMatchObject({ toString: "ts-value", constructor: "ctor-value" });
    expect(exported[1]).toMatchObject({ toString: "", constructor: "" });
  });

  it("CSV input with prototype-named columns becomes rows holding exactly those cells", async () => {
    const prefix = tag("proto-csv");
    const csv = `id,name,domain,toString,hasOwnProperty\n${prefix}-0,Csv Proto,proto.test,a,b\n${prefix}-1,Csv Proto Two,proto.test,,\n`;
    const run = await waitForRun(await startRun("demo-enrich", { csv }));
    expect(run.status).toBe("completed");
    const stored = await datasetRows(run.runId, "leads");
    expect(stored.map((row) => [row.toString, row.hasOwnProperty])).toEqual([
      ["a", "b"],
      ["", ""],
    ]);
    const { rows: exported } = await exportCsv(run.runId, "leads");
    expect(exported.map((row) => [row.toString, row.hasOwnProperty])).toEqual([
      ["a", "b"],
      ["", ""],
    ]);
  });
});

describe("CSV input headers", () => {
  it("refuses a header that names a column twice, with 400 naming the column", async () => {
    const csv = "id,name,domain,name\n1,Ada Lovelace,example.com,Ada King\n";
    const { status, body } = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input: { csv } } });
    expectInvalid(status, body, "input.csv");
    expect(body.error.message).toContain('"name"');
  });
});

describe("CSV export with ?safe=1", () => {
  it("prefixes cells that a spreadsheet would run as formulas with a single quote; without it, cells are as stored", async () => {
    const prefix = tag("safe");
    const cells = { eq: "=1+1", plus: "+1", minus: "-1", at: "@SUM(A1)", tab: "\t=1", cr: "\r=1", plain: "a=b", negative: -5 };
    const rows = [{ id: `${prefix}-0`, name: "Safe Person", domain: "safe.test", "=cmd": "x", ...cells }];
    const run = await waitForRun(await startRun("demo-enrich", { rows }));
    expect(run.status).toBe("completed");

    const raw = await exportCsv(run.runId, "leads");
    expect(raw.header).toContain("=cmd");
    expect(raw.rows[0]).toMatchObject({ ...cells, negative: "-5" });

    const safe = await exportCsv(run.runId, "leads", "&safe=1");
    expect(safe.header).toContain("'=cmd");
    expect(safe.rows[0]).toMatchObject({
      eq: "'=1+1",
      plus: "'+1",
      minus: "'-1",
      at: "'@SUM(A1)",
      tab: "'\t=1",
      cr: "'\r=1",
      plain: "a=b",
      negative: "-5",
    });
  });

  it("refuses an unknown value of safe", async () => {
    const run = await waitForRun(await startRun("demo-enrich", { rows: [{ id: tag("safe-q"), name: "Q", domain: "safe.test" }] }));
    const { status, body } = await apiJson(`/v1/runs/${run.runId}/datasets/leads?format=csv&safe=yes`);
    expectInvalid(status, body, "safe");
  });
});

describe("nesting depth of JSON bodies", () => {
  /** A run request whose one row carries `deep`, nested `levels` levels, as JSON text (the test's own JSON.stringify overflows first). */
  const deepRun = (levels: number, id: string) =>
    `{"play":"demo-enrich","input":{"rows":[{"id":${JSON.stringify(id)},"name":"Deep Person","domain":"deep.test","deep":${nestedText(levels)}}]}}`;
  const post = (path: string, body: string, headers: Record<string, string> = {}) =>
    apiJson(path, { method: "POST", body, headers: { "Content-Type": "application/json", ...headers } });

  it("accepts a run input nested 32 levels deep", async () => {
    // input (1) > rows (2) > row (3) > deep: 29 more levels = 32.
    const { status, body } = await post("/v1/runs", deepRun(29, tag("deep-ok")));
    expect(status).toBe(202);
    // Runs end inside their test: one still running when the file ends is cut off by its teardown.
    expect((await waitForRun(body.runId)).status).toBe("completed");
  });

  for (const levels of [30, 1_000, 10_000, 1_000_000]) {
    it(`refuses a row field nested ${levels} levels with 400 naming it, before storing anything`, async () => {
      const key = tag("deep-key");
      const { status, body } = await post("/v1/runs", deepRun(levels, tag("deep")), { "Idempotency-Key": key });
      expectInvalid(status, body, "input.rows.0.deep.a");
      expect(body.error.message).toContain("32");
      // The Idempotency-Key was not claimed: a good request with it starts a run.
      const good = await apiJson("/v1/runs", {
        method: "POST",
        headers: { "Idempotency-Key": key },
        json: { play: "demo-enrich", input: { rows: [{ id: tag("deep-after"), name: "Deep Person", domain: "deep.test" }] } },
      });
      expect(good.status).toBe(202);
      expect((await waitForRun(good.body.runId)).status).toBe("completed");
    });
  }

  it("answers 400, never 5xx, for a body that is only arrays nested a million levels", async () => {
    const { status, body } = await post("/v1/runs", "[".repeat(1_000_000) + "]".repeat(1_000_000));
    expect(status).toBe(400);
    expect(body.error.code).toBe("invalid_request");
  });

  it("refuses signal data nested too deeply, and the wait then takes the next good signal", async () => {
    const runId = await startRun("demo-approval", { message: tag("deep signal") });
    for (const levels of [33, 1_000, 10_000]) {
      const { status, body } = await post(`/v1/runs/${runId}/signals/approve`, `{"data":${nestedText(levels)}}`);
      expectInvalid(status, body, "data.a");
    }
    const sent = await apiJson(`/v1/runs/${runId}/signals/approve`, { method: "POST", json: { data: { ok: true } } });
    expect(sent.status).toBe(202);
    const run = await waitForRun(runId);
    expect(run.result).toEqual({ approved: { ok: true } });
  });
});
