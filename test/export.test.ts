import { parse } from "csv-parse/sync";
import { describe, expect, it } from "vitest";
import { MAX_CSV_SLICE_CELLS } from "../src/runtime/map/dataset-export";
import { MAX_PAGE_ROWS } from "../src/runtime/map/dataset-view";
import { api, datasetRows, expectedEmail, startRun, waitForRun } from "./helpers";

/** How the CSV export writes a cell (src/http/datasets.ts). */
function cell(value: unknown): string {
  if (value === null || value === undefined) return "";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

describe("GET /v1/runs/<id>/datasets/<name>?format=csv", () => {
  it("streams a dataset of several export pages completely, and it parses back to the same rows", async () => {
    // 2,500 rows: two full export pages (MAX_PAGE_ROWS) and a partial one.
    // Names with commas, quotes and newlines exercise the CSV quoting.
    const rows = Array.from({ length: 2500 }, (_, i) => ({
      id: `csv${i}`,
      name: i % 97 === 0 ? `Quote "${i}", Esq.` : i % 101 === 0 ? `Multi\nLine ${i}` : `Csv Person ${i}`,
      domain: "csv.test",
      ...(i % 500 === 7 ? { throw: true } : {}),
    }));
    expect(rows.length).toBeGreaterThan(2 * MAX_PAGE_ROWS);
    const run = await waitForRun(await startRun("test-map", { rows }), { timeoutMs: 120_000 });
    expect(run.status).toBe("completed");
    expect(run.result).toMatchObject({ total: 2500, completed: 2495, failed: 5 });

    const res = await api(`/v1/runs/${run.runId}/datasets/items?format=csv`);
    expect(res.status).toBe(200);
    expect(res.headers.get("Content-Type")).toMatch(/^text\/csv/);
    const text = await res.text();
    const parsed = parse(text, { columns: true }) as Record<string, string>[];
    expect(parsed).toHaveLength(2500);
    expect(Object.keys(parsed[0]!)).toEqual(["id", "name", "domain", "email", "shout", "throw", "_key", "_status", "_error"]);

    const stored = await datasetRows(run.runId, "items");
    expect(parsed).toEqual(stored.map((row) => Object.fromEntries(Object.keys(parsed[0]!).map((col) => [col, cell(row[col])]))));
    parsed.forEach((row, i) => {
      expect(row._key).toBe(`csv${i}`);
      expect(row.email).toBe(expectedEmail(rows[i]!.name, "csv.test"));
    });
    expect(parsed.filter((r) => r._status === "failed").map((r) => r._key)).toEqual(rows.filter((r) => r.throw).map((r) => r.id));
  });

  it("writes a page of rows too wide to write at once in slices: every row, every column, every cell", async () => {
    // 1,000 rows of 200 shared fields and one of 40 others each: one export page (a shard reads up to 999 rows at once),
    // of 248 columns with the computed and meta ones. Some cells need quoting, so a slice cannot cut through one.
    const prefix = `wide-${Date.now().toString(36)}`;
    const rows = Array.from({ length: 1000 }, (_, i) => ({
      id: `${prefix}-${i}`,
      name: `Wide Person ${i}`,
      domain: "wide.test",
      ...Object.fromEntries(Array.from({ length: 200 }, (_, j) => [`c${j}`, j % 50 === 0 ? `"${i}", ${j}\nnext` : `${i}.${j}`])),
      [`own${i % 40}`]: i,
    }));
    const run = await waitForRun(await startRun("demo-enrich", { rows }), { timeoutMs: 120_000 });
    expect(run.status).toBe("completed");

    const res = await api(`/v1/runs/${run.runId}/datasets/leads?format=csv`);
    expect(res.status).toBe(200);
    const [header, ...lines] = parse(await res.text()) as string[][];
    expect(header).toHaveLength(248);
    expect(lines.length * header!.length).toBeGreaterThan(2 * MAX_CSV_SLICE_CELLS);
    const stored = await datasetRows(run.runId, "leads");
    expect(new Set(header)).toEqual(new Set(stored.flatMap((row) => Object.keys(row))));
    expect(lines).toEqual(stored.map((row) => header!.map((column) => cell(row[column]))));
    expect(lines.map((line) => line[header!.indexOf("_key")])).toEqual(rows.map((row) => row.id));
  });
});
