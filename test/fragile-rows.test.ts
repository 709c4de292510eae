/**
 * Rows on which the play's own code throws, its row schema's transform or its
 * map's key function (`row.email.toLowerCase()` on a row without an email):
 * in an upload each such row fails alone, `invalid_row` naming its line, and
 * the rest of its chunk runs; in hand, a submit is refused 400 naming the row
 * and a key that cannot be made fails the run naming it, never a 5xx or a
 * chunk failing on every try. The `test-fragile-rows` play has both.
 */
import { expect, it } from "vitest";
import { api, apiJson, datasetRows, startRun, waitForRun } from "./helpers";

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
    [`#line:2:${uploaded.body.uploadId}`, "failed"],
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

it("fails a row whose key is not well-formed Unicode on its own in an upload, and names it in hand", async () => {
  // `\ud800` is valid JSON and parses to a lone surrogate, which storage would write as U+FFFD: another key.
  const ndjson = '{"id":"1","email":"a@x.test"}\n{"id":"2","email":"b\\ud800@x.test"}\n{"id":"3","email":"c@x.test"}\n';
  const uploaded = await apiJson("/v1/uploads", { method: "POST", body: ndjson, headers: { "Content-Type": "application/x-ndjson" } });
  expect(uploaded.status).toBe(201);
  const run = await waitForRun(await startRun(play, { upload: uploaded.body.uploadId }));
  expect(run.status, JSON.stringify(run.error)).toBe("completed");
  expect(run.result).toEqual({ completed: 2, failed: 1 });
  const rows = await datasetRows(run.runId, "fragile");
  expect(rows.map((row) => [row._key, row._status])).toEqual([
    ["a@x.test", "completed"],
    [`#line:2:${uploaded.body.uploadId}`, "failed"],
    ["c@x.test", "completed"],
  ]);
  expect(rows[1]!._error).toMatch(/^invalid_row: line 2: has a key that is not well-formed Unicode/);
  const inHand = await waitForRun(
    await startRun(play, {
      rows: [
        { id: "1", email: "a@x.test" },
        { id: "2", email: "b\ud800@x.test" },
      ],
    }),
  );
  expect(inHand.error).toMatchObject({
    code: "invalid_row_key",
    message: expect.stringMatching(/^row 1 has a key that is not well-formed/),
  });
});

it("stores a failed row's error with the deployment's secrets redacted, as pages and exports read it", async () => {
  // What a tool's error may quote: its own credential (the test Worker's SIM_API_KEY), or an authorization header.
  const rows = [
    { id: "k1", message: "401 from the provider: key sim-secret-credential-7f3a9c was refused" },
    { id: "k2", message: "sent Authorization: Bearer abc.def.ghi" },
  ];
  const run = await waitForRun(await startRun("test-throwing-rows", { rows }));
  expect(run.result).toEqual({ failed: 2 });
  const stored = await datasetRows(run.runId, "thrown");
  expect(stored.map((row) => row._error)).toEqual([
    "401 from the provider: key [REDACTED] was refused",
    "sent Authorization: Bearer [REDACTED]",
  ]);
  // Exports read what was stored: the error as redacted (the input column holds what the test sent).
  const ndjson = (await (await api(`/v1/runs/${run.runId}/datasets/thrown?format=ndjson`)).text()).trim().split("\n");
  expect(ndjson.map((line) => JSON.parse(line)._error)).toEqual(stored.map((row) => row._error));
});

it("keys a keyless row of an upload by its line and its upload: another upload's line, or a user's key, stays another row", async () => {
  const uploadOf = async (lines: object[]) => {
    const body = `${lines.map((line) => JSON.stringify(line)).join("\n")}\n`;
    const uploaded = await apiJson("/v1/uploads", { method: "POST", body, headers: { "Content-Type": "application/x-ndjson" } });
    expect(uploaded.status).toBe(201);
    return uploaded.body.uploadId as string;
  };
  const view = async (runId: string) => (await datasetRows(runId, "fragile")).map((row) => [row._key, row._status, row.id]);
  // A user's own key that reads like a keyless line's, and two uploads whose line 2 has no key.
  const inHand = await waitForRun(await startRun(play, { rows: [{ id: "in-hand", email: "#line:2" }] }));
  expect(inHand.result).toEqual({ completed: 1, failed: 0 });
  const first = await uploadOf([{ id: "first-1", email: "first@x.test" }, { id: "first-2" }]);
  const second = await uploadOf([{ id: "second-1", email: "second@x.test" }, { id: "second-2" }]);
  const firstRun = await waitForRun(await startRun(play, { upload: first }));
  const secondRun = await waitForRun(await startRun(play, { upload: second }));
  expect([firstRun.result, secondRun.result]).toEqual([
    { completed: 1, failed: 1 },
    { completed: 1, failed: 1 },
  ]);
  // The user's row is still the dataset's row of its key: run again, it is reused, not computed again.
  const estimate = await apiJson("/v1/runs/estimate", {
    method: "POST",
    json: { play, input: { rows: [{ id: "in-hand", email: "#line:2" }] } },
  });
  expect(estimate.status).toBe(200);
  expect(estimate.body.rows).toEqual({ total: 1, reusable: 1, toCompute: 0 });
  // Each run's view holds its own rows.
  expect(await view(inHand.runId)).toEqual([["#line:2", "completed", "in-hand"]]);
  expect(await view(firstRun.runId)).toEqual([
    ["first@x.test", "completed", "first-1"],
    [`#line:2:${first}`, "failed", "first-2"],
  ]);
  expect(await view(secondRun.runId)).toEqual([
    ["second@x.test", "completed", "second-1"],
    [`#line:2:${second}`, "failed", "second-2"],
  ]);
  // A rerun of the same upload makes the same keys: its view is the first run's.
  const rerun = await apiJson(`/v1/runs/${firstRun.runId}/rerun`, { method: "POST", json: {} });
  expect(rerun.status).toBe(202);
  const again = await waitForRun(rerun.body.runId);
  expect(again.result).toEqual({ completed: 1, failed: 1 });
  expect(await view(again.runId)).toEqual(await view(firstRun.runId));
});
