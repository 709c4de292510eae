/**
 * Rows on which the play's own code throws, its row schema's transform or its
 * map's key function (`row.email.toLowerCase()` on a row without an email):
 * in an upload each such row fails alone, `invalid_row` naming its line, and
 * the rest of its chunk runs; in hand, a submit is refused 400 naming the row
 * and a key that cannot be made fails the run naming it, never a 5xx or a
 * chunk failing on every try. The `test-fragile-rows` play has both.
 */
import { expect, it } from "vitest";
import { apiJson, datasetRows, startRun, waitForRun } from "./helpers";

const play = "test-fragile-rows";

it("fails only the rows of an upload the schema or the key function throws on; the others complete", async () => {
  const lines = [
    { id: "1", email: "A@x.test" },
    { id: "2" },
    { id: "3", email: "c@x.test", site: "!throw" },
    { id: "4", email: "D@x.test", site: "d.test" },
  ];
  const ndjson = `${lines.map((line) => JSON.stringify(line)).join("\n")}\n`;
  const uploaded = await apiJson("/v1/uploads", { method: "POST", body: ndjson, headers: { "Content-Type": "application/x-ndjson" } });
  expect(uploaded.status).toBe(201);
  const run = await waitForRun(await startRun(play, { upload: uploaded.body.uploadId }));
  expect(run.status, JSON.stringify(run.error)).toBe("completed");
  expect(run.result).toEqual({ completed: 2, failed: 2 });
  const rows = await datasetRows(run.runId, "fragile");
  expect(rows.map((row) => [row._key, row._status])).toEqual([
    ["a@x.test", "completed"],
    ["#line:2", "failed"],
    ["c@x.test", "failed"],
    ["d@x.test", "completed"],
  ]);
  expect(rows[0]!.lower).toBe("a@x.test");
  expect(rows[1]!._error).toMatch(/^invalid_row: line 2: has no key \(the key function threw: .*toLowerCase/);
  expect(rows[2]!._error).toBe("invalid_row: line 3: the row schema threw: site is not a URL");
});

it("refuses rows in hand the schema throws on with a 400 naming the row", async () => {
  const { status, body } = await apiJson("/v1/runs", {
    method: "POST",
    json: {
      play,
      input: {
        rows: [
          { id: "1", email: "a@x.test" },
          { id: "2", email: "b@x.test", site: "!throw" },
        ],
      },
    },
  });
  expect(status).toBe(400);
  expect(JSON.stringify(body)).toContain("the row schema threw: site is not a URL");
});

it("fails a run whose rows in hand have a row the key function throws on, naming the row", async () => {
  const run = await waitForRun(await startRun(play, { rows: [{ id: "1", email: "a@x.test" }, { id: "2" }] }));
  expect(run.status).toBe("failed");
  expect(run.error.code).toBe("invalid_row_key");
  expect(run.error.message).toMatch(/row 1 has no key \(the key function threw: /);
});
