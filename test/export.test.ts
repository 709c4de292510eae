import { parse } from "csv-parse/sync";
import { describe, expect, it } from "vitest";
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
});
