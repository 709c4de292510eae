import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { app } from "../src/http/app";
import { api, apiJson, startRun, waitForRun } from "./helpers";

const lead = { id: "1", name: "Ada Lovelace", domain: "example.com" };

function expectError(body: any, code: string) {
  expect(body).toEqual({ error: expect.objectContaining({ code, message: expect.any(String) }) });
}

describe("authentication and org isolation", () => {
  it("answers 401 without a token or with an unknown one", async () => {
    for (const token of [null, "nope"]) {
      const { status, body } = await apiJson("/v1/runs", { token });
      expect(status).toBe(401);
      expectError(body, "unauthorized");
    }
    const malformed = await api("/v1/plays", { token: null, headers: { Authorization: "Basic abc" } });
    expect(malformed.status).toBe(401);
  });

  it("hides another org's run, events, datasets and cancel behind a 404", async () => {
    const runId = await startRun("demo-enrich", { rows: [lead] });
    await waitForRun(runId);
    for (const [method, path] of [
      ["GET", `/v1/runs/${runId}`],
      ["GET", `/v1/runs/${runId}/events`],
      ["GET", `/v1/runs/${runId}/datasets/leads`],
      ["POST", `/v1/runs/${runId}/cancel`],
    ] as const) {
      const { status, body } = await apiJson(path, { method, token: "other-token" });
      expect(status, `${method} ${path}`).toBe(404);
      expectError(body, "run_not_found");
    }
    const mine = await apiJson(`/v1/runs/${runId}`);
    expect(mine.status).toBe(200);
    const theirs = await apiJson("/v1/runs", { token: "other-token" });
    expect(theirs.body.runs.map((r: any) => r.runId)).not.toContain(runId);
  });

  it("answers 404 for runs that do not exist, well-formed or not", async () => {
    for (const id of ["run_0123456789abcdef0123456789abcdef", "nonsense"]) {
      const { status, body } = await apiJson(`/v1/runs/${id}`);
      expect(status).toBe(404);
      expectError(body, "run_not_found");
    }
  });
});

describe("deployed: no local development, no simulated provider", () => {
  const PROD_TOKEN = "prod-token-0123456789abcdef";
  const deployed = (API_TOKENS: string | undefined) =>
    ({ ...env, TROUPE_LOCAL_DEV: undefined, SIM_PROVIDER: undefined, TROUPE_TEST_MODE: undefined, API_TOKENS }) as Env;
  const request = (path: string, target: Env, init: RequestInit & { token?: string } = {}) =>
    app.request(
      path,
      { ...init, headers: init.token ? { Authorization: `Bearer ${init.token}`, "Content-Type": "application/json" } : {} },
      target,
    );

  it("refuses every request with 503 server_misconfigured when API_TOKENS is unset or empty, dev-token included", async () => {
    for (const tokens of [undefined, ""]) {
      for (const token of ["dev-token", PROD_TOKEN, undefined]) {
        const res = await request("/v1/plays", deployed(tokens), { token });
        expect(res.status, `${tokens} ${token}`).toBe(503);
        const body: any = await res.json();
        expectError(body, "server_misconfigured");
        expect(body.error.message).toContain("wrangler secret put API_TOKENS --env production");
      }
    }
  });

  it("refuses a configuration with a token shorter than 16 characters, without naming it", async () => {
    const res = await request("/v1/plays", deployed(JSON.stringify({ [PROD_TOKEN]: "prod", abcde: "acme-weak" })), { token: PROD_TOKEN });
    expect(res.status).toBe(503);
    const body: any = await res.json();
    expectError(body, "server_misconfigured");
    expect(body.error.message).not.toContain("abcde");
    // Nor its org: the answer goes to anyone, signed in or not.
    expect(body.error.message).not.toContain("acme-weak");
  });

  it("authenticates long tokens, and neither lists nor starts demo plays", async () => {
    const target = deployed(JSON.stringify({ [PROD_TOKEN]: "prod" }));
    expect((await request("/v1/plays", target, { token: "dev-token" })).status).toBe(401);
    const listed = await request("/v1/plays", target, { token: PROD_TOKEN });
    expect(listed.status).toBe(200);
    expect(((await listed.json()) as any).plays).toEqual([]);
    const started = await request("/v1/runs", target, {
      token: PROD_TOKEN,
      method: "POST",
      body: JSON.stringify({ play: "demo-enrich", input: { rows: [lead] } }),
    });
    expect(started.status).toBe(404);
    expectError(await started.json(), "unknown_play");
  });
});

describe("validation", () => {
  const cases: [string, unknown, string[]][] = [
    ["no play", { input: { rows: [] } }, ["play"]],
    ["play of the wrong type", { play: 7, input: { rows: [] } }, ["play"]],
    ["unknown field", { play: "demo-enrich", input: { rows: [] }, extra: 1 }, ["(body)"]],
    ["force not boolean", { play: "demo-enrich", input: { rows: [] }, force: "yes" }, ["force"]],
    ["input missing rows", { play: "demo-enrich", input: {} }, ["input"]],
    ["row missing a field", { play: "demo-enrich", input: { rows: [{ id: "1", name: "A" }] } }, ["input.rows.0.domain"]],
    ["csv that does not parse", { play: "demo-enrich", input: { csv: 'id,name,domain\n1,"unterminated,x\n' } }, ["input.csv"]],
    ["row over the size limit", { play: "demo-enrich", input: { rows: [{ ...lead, name: "x".repeat(70_000) }] } }, ["input.rows.0"]],
    [
      'rows with no id (null ids were one row, keyed "null")',
      {
        play: "demo-enrich",
        input: {
          rows: [
            { ...lead, id: null },
            { ...lead, id: null },
          ],
        },
      },
      ["input.rows.0.id", "input.rows.1.id"],
    ],
    ["a row whose id is an object", { play: "demo-enrich", input: { rows: [{ ...lead, id: {} }] } }, ["input.rows.0.id"]],
    [
      "a CSV of more rows than a run takes",
      { play: "demo-enrich", input: { csv: `id,name,domain\n${"1,a,b\n".repeat(100_001)}` } },
      ["input.csv"],
    ],
    ["maxSpend past any spend a run could count", { play: "demo-enrich", input: { rows: [lead] }, maxSpend: 1e303 }, ["maxSpend"]],
    // Storage would write it as U+FFFD, another key: the run failed as a whole, every good row with it.
    ["a row id that is a lone surrogate", { play: "demo-enrich", input: { rows: [lead, { ...lead, id: "\ud800" }] } }, ["input.rows.1.id"]],
    // 30,000 characters of three UTF-8 bytes each: under 64 Ki as UTF-16, 90 KB as written (an upload refused it).
    [
      "a row over the size limit in UTF-8",
      { play: "demo-enrich", input: { rows: [{ ...lead, note: "中".repeat(30_000) }] } },
      ["input.rows.0"],
    ],
    ["csv with no header line", { play: "demo-enrich", input: { csv: "" } }, ["input.csv"]],
  ];
  for (const [label, json, paths] of cases) {
    it(`rejects ${label} with 400 invalid_request naming the field`, async () => {
      const { status, body } = await apiJson("/v1/runs", { method: "POST", json });
      expect(status).toBe(400);
      expectError(body, "invalid_request");
      const named = (body.error.details as { path: string }[]).map((d) => d.path);
      for (const path of paths)
        expect(
          named.some((n) => n.startsWith(path)),
          `${named} names ${path}`,
        ).toBe(true);
    });
  }

  it("lists the first hundred issues of an input where every row is wrong, and how many rows were", async () => {
    const rows = Array.from({ length: 50_000 }, (_, i) => ({ id: i }));
    const { status, body } = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input: { rows } } });
    expect(status).toBe(400);
    expectError(body, "invalid_request");
    const details = body.error.details as { path: string; message: string }[];
    // Two issues a row (name and domain): 100,000 were listed, a 35 MB answer at twice this many rows.
    expect(details).toHaveLength(100);
    expect(details.slice(0, 2).map((d) => d.path)).toEqual(["input.rows.0.name", "input.rows.0.domain"]);
    expect(details.at(-1)!.message).toMatch(/^50000 rows do not fit/);
    expect(body.error.message.length).toBeLessThan(20_000);
  });

  it("cuts an issue naming every unknown key of a body, and a path that is a key of megabytes", async () => {
    const keys = Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`unknown_key_${i}`, 0]));
    const unknown = await apiJson("/v1/runs/run_0123456789abcdef0123456789abcdef/rerun", { method: "POST", json: keys });
    expect(unknown.status).toBe(400);
    expectError(unknown.body, "invalid_request");
    // zod's one issue named all 100,000 keys: a 4 MB message, twice in the answer.
    expect(JSON.stringify(unknown.body).length).toBeLessThan(2_000);
    expect(unknown.body.error.details[0].message).toMatch(/^Unrecognized keys: "unknown_key_0", .*… \(\d+ characters more\)$/);
    const long = "k".repeat(1_000_000);
    const path = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input: { rows: [{ [long]: 1 }] } } });
    expect(path.status).toBe(400);
    expect(JSON.stringify(path.body).length).toBeLessThan(5_000);
  });

  it("answers 400 for a spend range naming a day the calendar does not have", async () => {
    for (const query of ["to=2024-02-32", "to=2024-13-01", "from=2024-02-30&to=2024-03-01", "from=2024-00-10"]) {
      const { status, body } = await apiJson(`/v1/spend?${query}`);
      expect(status, query).toBe(400);
      expectError(body, "invalid_request");
    }
    expect((await apiJson("/v1/spend?from=2024-02-29&to=2024-03-01")).status).toBe(200);
  });

  it("rejects a body that is not JSON, naming the body", async () => {
    for (const [method, path] of [
      ["POST", "/v1/runs"],
      ["PUT", "/v1/pacing/sim"],
      ["PUT", "/v1/sim/config"],
    ]) {
      const { status, body } = await apiJson(path!, { method, body: "{nope", headers: { "Content-Type": "application/json" } });
      expect(status, path).toBe(400);
      expectError(body, "invalid_request");
      expect(body.error.details, path).toEqual([expect.objectContaining({ path: "(body)" })]);
    }
  });

  it("rejects bad query parameters", async () => {
    for (const path of [
      "/v1/runs?limit=0",
      "/v1/runs?limit=500",
      "/v1/runs?cursor=%%%",
      // No such filter: refused, not ignored (which answered every run of the org).
      "/v1/runs?parentRunId=run_0123456789abcdef0123456789abcdef",
      "/v1/runs/run_0123456789abcdef0123456789abcdef/events?after=-1",
    ]) {
      const { status, body } = await apiJson(path);
      expect(status, path).toBe(400);
      expectError(body, "invalid_request");
    }
  });

  it("answers 404 unknown_play for a play that does not exist", async () => {
    const { status, body } = await apiJson("/v1/runs", { method: "POST", json: { play: "no-such-play", input: {} } });
    expect(status).toBe(404);
    expectError(body, "unknown_play");
  });

  it("answers 413 for a body over the limit, without creating a run", async () => {
    const before = (await apiJson("/v1/runs?limit=200")).body.runs.length;
    const res = await api("/v1/runs", {
      method: "POST",
      body: "x".repeat(17 * 1024 * 1024),
      headers: { "Content-Type": "application/json" },
    });
    expect(res.status).toBe(413);
    expectError(await res.json(), "request_too_large");
    expect((await apiJson("/v1/runs?limit=200")).body.runs.length).toBe(before);
  });
});

describe("runs and plays", () => {
  it("lists the plays", async () => {
    const { body } = await apiJson("/v1/plays");
    expect(body.plays).toContainEqual(expect.objectContaining({ name: "demo-enrich", description: expect.any(String) }));
  });

  it("starts a run with 202 and links, and lists the org's runs newest first, paged", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const { status, body } = await apiJson("/v1/runs", {
        method: "POST",
        json: { play: "demo-enrich", input: { rows: [{ ...lead, id: `list-${i}` }] } },
      });
      expect(status).toBe(202);
      expect(body).toEqual({
        runId: expect.stringMatching(/^run_/),
        status: "queued",
        links: {
          self: `/v1/runs/${body.runId}`,
          live: `/v1/runs/${body.runId}/live`,
          events: `/v1/runs/${body.runId}/events`,
          datasets: { leads: `/v1/runs/${body.runId}/datasets/leads` },
        },
      });
      ids.push(body.runId);
      await waitForRun(body.runId);
    }
    const first = await apiJson("/v1/runs?limit=2");
    expect(first.body.runs.map((r: any) => r.runId)).toEqual([ids[2], ids[1]]);
    expect(first.body.runs[0]).toMatchObject({ play: "demo-enrich", status: "completed", parentRunId: null });
    const second = await apiJson(`/v1/runs?limit=2&cursor=${encodeURIComponent(first.body.nextCursor)}`);
    expect(second.body.runs[0].runId).toBe(ids[0]);
  });

  it("pages a run's events by cursor", async () => {
    const runId = await startRun("demo-enrich", { rows: [lead] });
    await waitForRun(runId);
    const page1 = await apiJson(`/v1/runs/${runId}/events?limit=1`);
    expect(page1.body.events).toHaveLength(1);
    expect(page1.body.events[0]).toMatchObject({ seq: 1, type: "run.started", at: expect.any(String) });
    const page2 = await apiJson(`/v1/runs/${runId}/events?after=${page1.body.nextCursor}&limit=1000`);
    expect(page2.body.events[0].seq).toBe(2);
    expect(page2.body.events.at(-1).type).toBe("run.completed");
  });

  it("answers a dataset the play declares and has not written yet as empty, in every format", async () => {
    const runId = await startRun("test-waits", { keys: ["never"], timeoutMs: 60_000 });
    const { status, body } = await apiJson(`/v1/runs/${runId}/datasets/later`);
    expect(status).toBe(200);
    expect(body).toEqual({ rows: [], total: 0, offset: 0, limit: 100, nextCursor: null });
    const csv = await api(`/v1/runs/${runId}/datasets/later?format=csv`);
    expect(csv.status).toBe(200);
    // The header a started dataset with no rows has, line ending included.
    expect(await csv.text()).toBe("_key,_status,_error\n");
    const empty = await waitForRun(await startRun("test-stages", { rows: [] }));
    expect(empty.status).toBe("completed");
    expect(await (await api(`/v1/runs/${empty.runId}/datasets/stage-found?format=csv`)).text()).toBe("_key,_status,_error\n");
    const ndjson = await api(`/v1/runs/${runId}/datasets/later?format=ndjson`);
    expect(await ndjson.text()).toBe("");
    const cursor = await apiJson(`/v1/runs/${runId}/datasets/later?cursor=abc`);
    expect(cursor.status).toBe(400);
    expect((await apiJson(`/v1/runs/${runId}/datasets/other`)).status).toBe(404);
    await apiJson(`/v1/runs/${runId}/cancel`, { method: "POST" });
    await waitForRun(runId);
  });

  it("answers 404 for a dataset the run does not have", async () => {
    const runId = await startRun("demo-enrich", { rows: [lead] });
    await waitForRun(runId);
    const { status, body } = await apiJson(`/v1/runs/${runId}/datasets/nope`);
    expect(status).toBe(404);
    expectError(body, "dataset_not_found");
    // Names of an object's own machinery are not datasets either (they answered 200 with no rows).
    for (const name of ["constructor", "toString", "__proto__"]) {
      const named = await apiJson(`/v1/runs/${runId}/datasets/${name}`);
      expect(named.status, name).toBe(404);
      expect((await api(`/v1/runs/${runId}/datasets/${name}?format=csv`)).status, name).toBe(404);
    }
  });
});
