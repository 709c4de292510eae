import { describe, expect, it } from "vitest";
import { z } from "zod";
import { definePlay, describeInputAs } from "../src/play/define";
import { inputJsonSchema } from "../src/play/json-schema";
import { apiJson, startRun, waitForRun } from "./helpers";

type ListedPlay = { name: string; description: string; input: Record<string, any>; datasets: string[] };

async function listedPlay(name: string): Promise<ListedPlay> {
  const { status, body } = await apiJson<{ plays: ListedPlay[] }>("/v1/plays");
  expect(status).toBe(200);
  const play = body.plays.find((p) => p.name === name);
  if (!play) throw new Error(`play ${name} is not listed: ${JSON.stringify(body.plays.map((p) => p.name))}`);
  return play;
}

describe("GET /v1/plays describes each play", () => {
  it("gives demo-enrich's input as JSON Schema of both shapes it accepts, and its dataset", async () => {
    const play = await listedPlay("demo-enrich");
    expect(play.datasets).toEqual(["leads"]);
    expect(play.input.$schema).toBe("https://json-schema.org/draft/2020-12/schema");
    expect(play.input["x-troupe-incomplete"]).toBeUndefined();
    const [rowsShape, csvShape] = play.input.anyOf;
    expect(rowsShape).toMatchObject({ type: "object", required: ["rows"], additionalProperties: false });
    expect(rowsShape.properties.rows).toMatchObject({ type: "array", maxItems: 100_000 });
    expect(rowsShape.properties.rows.items).toMatchObject({
      type: "object",
      required: ["id", "name", "domain"],
      properties: { id: { type: ["string", "number"] }, name: { type: "string", maxLength: 500 }, domain: { type: "string" } },
    });
    expect(csvShape).toMatchObject({
      type: "object",
      required: ["csv"],
      properties: { csv: { type: "string", description: expect.any(String) } },
    });
  });

  it("gives demo-approval's and demo-accounts' inputs and datasets", async () => {
    const approval = await listedPlay("demo-approval");
    expect(approval.datasets).toEqual([]);
    expect(approval.input).toMatchObject({
      type: "object",
      required: ["message"],
      additionalProperties: false,
      properties: { message: { type: "string" }, timeoutMs: { type: "integer" } },
    });
    const accounts = await listedPlay("demo-accounts");
    expect(accounts.datasets).toEqual(["accounts"]);
    expect(accounts.input.properties.accounts.items.properties.people).toMatchObject({ type: "array", items: { type: "string" } });
  });

  it("lists plays that declare no datasets with an empty list", async () => {
    const play = await listedPlay("test-map");
    expect(play.datasets).toEqual([]);
    expect(play.input.properties.keyMode).toMatchObject({ enum: ["field", "function", "hash"], default: "field" });
  });
});

describe("input schemas zod cannot express", () => {
  it("leaves those parts open and says why, instead of failing", () => {
    const schema = z.object({ name: z.string(), since: z.date(), big: z.bigint() });
    const json = inputJsonSchema(schema);
    expect(json).toMatchObject({ type: "object", properties: { name: { type: "string" }, since: {}, big: {} } });
    expect(json["x-troupe-incomplete"]).toEqual(expect.any(String));
  });

  it("documents a transform by the shape it was described as", () => {
    const lines = describeInputAs(
      z.string().transform((text) => text.split("\n")),
      z.string().describe("one item per line"),
    );
    expect(inputJsonSchema(lines)).toMatchObject({ type: "string", description: "one item per line" });
    // Without a description a transform still yields the schema of its input side.
    expect(inputJsonSchema(z.string().transform((text) => text.length))).toMatchObject({ type: "string" });
  });

  it("refuses dataset declarations that cannot travel in a URL, or repeat", () => {
    const base = { name: "declares", description: "", input: z.object({}), run: async () => null };
    expect(() => definePlay({ ...base, datasets: ["a/b"] })).toThrow(/dataset name "a\/b"/);
    expect(() => definePlay({ ...base, datasets: ["leads", "leads"] })).toThrow(/declared twice/);
    expect(definePlay({ ...base, datasets: ["leads", "leads.v2"] }).datasets).toEqual(["leads", "leads.v2"]);
  });
});

describe("a run's links name its datasets", () => {
  const lead = { id: "disc-1", name: "Ada Lovelace", domain: "example.com" };

  it("in the submit and rerun answers, and in GET /v1/runs/<id>", async () => {
    const submitted = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input: { rows: [lead] } } });
    expect(submitted.status).toBe(202);
    const runId = submitted.body.runId as string;
    expect(submitted.body.links.datasets).toEqual({ leads: `/v1/runs/${runId}/datasets/leads` });

    await waitForRun(runId);
    const run = await apiJson(`/v1/runs/${runId}`);
    expect(run.body.links).toEqual({
      self: `/v1/runs/${runId}`,
      live: `/v1/runs/${runId}/live`,
      events: `/v1/runs/${runId}/events`,
      datasets: { leads: `/v1/runs/${runId}/datasets/leads` },
    });
    // The link is where the rows are.
    const rows = await apiJson(run.body.links.datasets.leads);
    expect(rows.body).toMatchObject({ total: 1, rows: [{ _key: "disc-1", _status: "completed" }] });

    const rerun = await apiJson(`/v1/runs/${runId}/rerun`, { method: "POST" });
    expect(rerun.status).toBe(202);
    expect(rerun.body.links.datasets).toEqual({ leads: `/v1/runs/${rerun.body.runId}/datasets/leads` });
    await waitForRun(rerun.body.runId);
  });

  it("names a dataset the play did not declare once the run has written it", async () => {
    const runId = await startRun("test-calls", {
      rows: [{ id: "c1", tool: "sim_find_email", input: { name: "Ada", domain: "example.com" } }],
      dataset: "calls-undeclared",
    });
    await waitForRun(runId);
    const run = await apiJson(`/v1/runs/${runId}`);
    expect(run.body.links.datasets).toEqual({ "calls-undeclared": `/v1/runs/${runId}/datasets/calls-undeclared` });
  });
});
