import { env } from "cloudflare:workers";
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { Hono } from "hono";
import { beforeEach, describe, expect, it } from "vitest";
import { TroupeError } from "../src/core/errors";
import { withOutbound } from "../src/core/outbound";
import {
  callSim,
  callSimBatch,
  SIM_CALLER_HEADER,
  simConfig,
  simResult,
  simStats,
  simStub,
  updateSimConfig,
  resetSim,
} from "../src/sim/client";
import { simRoutes } from "../src/http/sim";

// One global simulator per test file: every test resets it and restores the default config.
beforeEach(async () => {
  await resetSim(env);
  const reply = await updateSimConfig(env, {
    latencyMs: 0,
    ratePerSecond: null,
    batchMaxSize: 50,
    rateLimitHeaders: "retry-after",
    maxConcurrent: null,
  });
  expect(reply.status).toBe(200);
});

const find = (name: string, domain: string, idempotencyKey: string) =>
  callSim(env, { tool: "sim_find_email", input: { name, domain }, idempotencyKey });

/** The expected verdict, computed apart from the simulator's own code. */
function expectedVerdict(email: string): string {
  const units = Array.from({ length: email.length }, (_, i) => email.charCodeAt(i));
  return units.reduce((a, b) => a + b, 0) % 3 === 0 ? "invalid" : "valid";
}

describe("sim_find_email", () => {
  it("joins whitespace runs with dots and lowercases name and domain", async () => {
    const a = await find("Ada   Lovelace", "Example.COM", "fe-1");
    expect(a).toMatchObject({ status: 200, body: { output: { email: "ada.lovelace@example.com" } } });
    const b = await find("Grace \t Brewster  HOPPER", "Navy.Mil", "fe-2");
    expect(b.body.output.email).toBe("grace.brewster.hopper@navy.mil");
  });

  it("bills each key once and counts replays of a billed key as duplicates", async () => {
    const first = await find("Alan Turing", "bletchley.uk", "bill-1");
    const replay = await find("Alan Turing", "bletchley.uk", "bill-1");
    expect(replay.status).toBe(200);
    expect(replay.body.output).toEqual(first.body.output);
    await find("Alan Turing", "bletchley.uk", "bill-2");

    const stats = await simStats(env);
    expect(stats).toMatchObject({ calls: 3, billed: 2, duplicates: 1, batchCalls: 0, rateLimited: 0 });
    expect(stats.byTool.sim_find_email).toEqual({ calls: 3, billed: 2 });
    expect(stats.byTool.sim_verify_email).toEqual({ calls: 0, billed: 0 });
  });

  it("answers !fail with a permanent 422 that is never billed", async () => {
    for (let i = 0; i < 2; i++) {
      const reply = await find("!fail Nobody", "example.com", "fail-1");
      expect(reply.status).toBe(422);
      expect(reply.body.error.code).toBe("person_not_found");
    }
    expect(await simStats(env)).toMatchObject({ calls: 2, billed: 0, duplicates: 0 });
  });

  it("answers !flaky with 503 on a key's first call, then succeeds and bills once", async () => {
    const first = await find("!flaky Ada", "example.com", "flaky-1");
    expect(first.status).toBe(503);
    const second = await find("!flaky Ada", "example.com", "flaky-1");
    expect(second.status).toBe(200);
    expect(second.body.output.email).toBe("!flaky.ada@example.com");
    // Each key is flaky on its own first call.
    expect((await find("!flaky Ada", "example.com", "flaky-2")).status).toBe(503);
    expect(await simStats(env)).toMatchObject({ calls: 3, billed: 1, duplicates: 0 });
  });

  it("rejects bad requests with 400 and bills nothing", async () => {
    const badInput = await callSim(env, { tool: "sim_find_email", input: { name: 3 }, idempotencyKey: "bad-1" });
    expect(badInput.status).toBe(400);
    expect(badInput.body.error.code).toBe("invalid_request");
    const unknown = await callSim(env, { tool: "sim_guess", input: {}, idempotencyKey: "bad-2" });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.code).toBe("unknown_tool");
    const noKey = await simStub(env).fetch("https://sim/call", {
      method: "POST",
      body: JSON.stringify({ tool: "sim_find_email", input: { name: "A", domain: "b.c" } }),
    });
    expect(noKey.status).toBe(400);
    expect(await noKey.json()).toMatchObject({ error: { code: "invalid_request" } });
    const notJson = await simStub(env).fetch("https://sim/call", { method: "POST", headers: { "Idempotency-Key": "bad-3" }, body: "{" });
    expect(notJson.status).toBe(400);
    expect(await notJson.json()).toMatchObject({ error: { code: "invalid_request" } });
    // Every request counts, refused ones and one whose body is not JSON among them (it was not counted at all).
    expect(await simStats(env)).toMatchObject({ calls: 4, billed: 0, duplicates: 0 });
  });
});

describe("sim_verify_email", () => {
  it("gives the verdict of the UTF-16 code-unit sum modulo 3", async () => {
    const emails = ["a@b.co", "ab@b.co", "abc@b.co", "ada.lovelace@example.com", "😀@emoji.io", "zoë@例え.jp"];
    const verdicts = new Set<string>();
    for (const [i, email] of emails.entries()) {
      const reply = await callSim(env, { tool: "sim_verify_email", input: { email }, idempotencyKey: `ve-${i}` });
      expect(reply.status).toBe(200);
      expect(reply.body.output).toEqual({ email, verdict: expectedVerdict(email) });
      verdicts.add(reply.body.output.verdict);
    }
    expect(verdicts).toEqual(new Set(["valid", "invalid"]));
  });
});

describe("batch", () => {
  it("answers each member in order, counts one call, and bills members by their keys", async () => {
    await callSim(env, { tool: "sim_verify_email", input: { email: "pre@billed.io" }, idempotencyKey: "m-pre" });
    const reply = await callSimBatch(env, {
      tool: "sim_verify_email",
      members: [
        { idempotencyKey: "m-1", input: { email: "one@x.io" } },
        { idempotencyKey: "m-2", input: { nope: true } },
        { idempotencyKey: "m-pre", input: { email: "pre@billed.io" } },
        { idempotencyKey: "m-3", input: { email: "three@x.io" } },
      ],
    });
    expect(reply.status).toBe(200);
    expect(reply.body.results).toEqual([
      { status: 200, output: { email: "one@x.io", verdict: expectedVerdict("one@x.io") } },
      { status: 400, error: expect.objectContaining({ code: "invalid_request" }) },
      { status: 200, output: { email: "pre@billed.io", verdict: expectedVerdict("pre@billed.io") } },
      { status: 200, output: { email: "three@x.io", verdict: expectedVerdict("three@x.io") } },
    ]);
    const stats = await simStats(env);
    expect(stats).toMatchObject({ calls: 2, batchCalls: 1, billed: 3, duplicates: 1 });
    expect(stats.byTool.sim_verify_email).toEqual({ calls: 2, billed: 3 });

    // A member key billed by a batch is a duplicate when called alone.
    await callSim(env, { tool: "sim_verify_email", input: { email: "one@x.io" }, idempotencyKey: "m-1" });
    expect(await simStats(env)).toMatchObject({ billed: 3, duplicates: 2 });
  });

  it("rejects oversize batches and non-batchable tools without billing", async () => {
    await updateSimConfig(env, { batchMaxSize: 3 });
    const members = [1, 2, 3, 4].map((i) => ({ idempotencyKey: `o-${i}`, input: { email: `${i}@x.io` } }));
    const oversize = await callSimBatch(env, { tool: "sim_verify_email", members });
    expect(oversize.status).toBe(400);
    expect(oversize.body.error.code).toBe("invalid_request");
    const fits = await callSimBatch(env, { tool: "sim_verify_email", members: members.slice(0, 3) });
    expect(fits.status).toBe(200);

    const notBatchable = await callSimBatch(env, {
      tool: "sim_find_email",
      members: [{ idempotencyKey: "nb-1", input: { name: "A", domain: "b.c" } }],
    });
    expect(notBatchable.status).toBe(400);
    expect(await simStats(env)).toMatchObject({ calls: 3, batchCalls: 3, billed: 3, duplicates: 0 });
  });
});

describe("config", () => {
  it("updates partially, validates, and keeps the rest", async () => {
    const reply = await updateSimConfig(env, { latencyMs: 5 });
    expect(reply.body).toEqual({
      latencyMs: 5,
      ratePerSecond: null,
      batchMaxSize: 50,
      rateLimitHeaders: "retry-after",
      maxConcurrent: null,
    });
    const bad = await simStub(env).fetch("https://sim/config", { method: "PUT", body: JSON.stringify({ latencyMs: -1, extra: 1 }) });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { code: "invalid_request" } });
    expect(await simConfig(env)).toEqual({
      latencyMs: 5,
      ratePerSecond: null,
      batchMaxSize: 50,
      rateLimitHeaders: "retry-after",
      maxConcurrent: null,
    });
  });

  it("rate-limits requests over ratePerSecond with 429 and Retry-After", async () => {
    await updateSimConfig(env, { ratePerSecond: 10 });
    const replies = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        simStub(env).fetch("https://sim/call", {
          method: "POST",
          headers: { "Idempotency-Key": `rl-${i}` },
          body: JSON.stringify({ tool: "sim_verify_email", input: { email: `${i}@rate.io` } }),
        }),
      ),
    );
    const limited = replies.filter((r) => r.status === 429);
    const ok = replies.filter((r) => r.status === 200);
    expect(ok.length).toBeGreaterThanOrEqual(10);
    expect(limited.length).toBeGreaterThan(0);
    expect(ok.length + limited.length).toBe(30);
    for (const r of limited) {
      expect(Number(r.headers.get("Retry-After"))).toBeGreaterThanOrEqual(1);
      const ms = Number(r.headers.get("Retry-After-Ms"));
      expect(ms).toBeGreaterThan(0);
      expect(ms).toBeLessThanOrEqual(1000);
      expect(await r.json()).toMatchObject({ error: { code: "rate_limited" } });
    }
    for (const r of ok) expect(await r.json()).toHaveProperty("output");
    const stats = await simStats(env);
    expect(stats).toMatchObject({ calls: 30, rateLimited: limited.length, billed: ok.length });

    const reply = await callSim(env, { tool: "sim_verify_email", input: { email: "x@y.z" }, idempotencyKey: "rl-client" });
    if (reply.status === 429) expect(Number(reply.headers.get("Retry-After-Ms"))).toBeGreaterThan(0);
  });

  it("states its limit in each rateLimitHeaders style, on every answer where the style says so", async () => {
    const call = (key: string, name = "Ada Lovelace") => find(name, "example.com", key);
    await updateSimConfig(env, { ratePerSecond: 3, rateLimitHeaders: "ietf" });
    const ietf = [await call("h-1"), await call("h-2", "!fail Nobody"), await call("h-3"), await call("h-4")];
    expect(ietf.map((r) => r.status)).toEqual([200, 422, 200, 429]);
    for (const r of ietf) expect(r.headers.get("RateLimit-Policy")).toBe('"default";q=3;w=1');
    expect(ietf.map((r) => r.headers.get("RateLimit"))).toEqual([
      '"default";r=2;t=1',
      '"default";r=1;t=1',
      '"default";r=0;t=1',
      '"default";r=0;t=1',
    ]);
    expect(ietf[3]!.headers.get("Retry-After")).toBe("1");

    await resetSim(env);
    await updateSimConfig(env, { rateLimitHeaders: "x-ratelimit" });
    const x = [await call("x-1"), await call("x-2"), await call("x-3"), await call("x-4")];
    expect(
      x.map((r) => [
        r.status,
        r.headers.get("X-RateLimit-Limit"),
        r.headers.get("X-RateLimit-Remaining"),
        r.headers.get("X-RateLimit-Reset"),
      ]),
    ).toEqual([
      [200, "3", "2", "1"],
      [200, "3", "1", "1"],
      [200, "3", "0", "1"],
      [429, "3", "0", "1"],
    ]);
    expect(Number(x[3]!.headers.get("Retry-After-Ms"))).toBeGreaterThan(0);

    await resetSim(env);
    await updateSimConfig(env, { rateLimitHeaders: "none" });
    const bare = [await call("n-1"), await call("n-2"), await call("n-3"), await call("n-4")];
    expect(bare.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    for (const r of bare) expect([...r.headers.keys()].filter((k) => /ratelimit|retry-after/i.test(k))).toEqual([]);
    expect(bare[3]!.body).toMatchObject({ error: { code: "rate_limited" } });

    // Reset restores the default style (a 429 with Retry-After only); the rest of the config stays.
    expect(await resetSim(env)).toMatchObject({ calls: 0 });
    expect(await simConfig(env)).toMatchObject({ ratePerSecond: 3, rateLimitHeaders: "retry-after" });
    const plain = [await call("p-1"), await call("p-2"), await call("p-3"), await call("p-4")];
    expect(plain[0]!.headers.get("RateLimit")).toBeNull();
    expect(plain[0]!.headers.get("X-RateLimit-Limit")).toBeNull();
    expect(plain[3]!.status).toBe(429);
    expect(plain[3]!.headers.get("Retry-After")).toBe("1");
    // A batch is one request, and its answer states the limit too.
    await resetSim(env);
    await updateSimConfig(env, { ratePerSecond: 10, rateLimitHeaders: "ietf" });
    const batch = await callSimBatch(env, { tool: "sim_verify_email", members: [{ idempotencyKey: "hb-1", input: { email: "a@b.co" } }] });
    expect(batch.headers.get("RateLimit")).toBe('"default";r=9;t=1');
    const invalid = await updateSimConfig(env, { rateLimitHeaders: "loud" as never });
    expect(invalid.status).toBe(400);
  });

  it("answers 429 to a request past maxConcurrent being answered at once, and admits it once one is answered", async () => {
    await updateSimConfig(env, { latencyMs: 200, maxConcurrent: 3 });
    const replies = await Promise.all(Array.from({ length: 5 }, (_, i) => find("Ada Lovelace", "example.com", `mc-${i}`)));
    const limited = replies.filter((r) => r.status === 429);
    expect(replies.filter((r) => r.status === 200)).toHaveLength(3);
    expect(limited).toHaveLength(2);
    expect(limited[0]!.body).toMatchObject({ error: { code: "too_many_concurrent_requests" } });
    expect(limited[0]!.headers.get("Retry-After-Ms")).toBe("200");
    expect((await find("Ada Lovelace", "example.com", "mc-again")).status).toBe(200);
    expect(await simStats(env)).toMatchObject({ calls: 6, rateLimited: 2, billed: 4, duplicates: 0 });
    // Under a rate limit as well, that 429 states the limit like every other answer.
    await updateSimConfig(env, { maxConcurrent: 1, ratePerSecond: 100, rateLimitHeaders: "ietf" });
    const pair = await Promise.all([find("Ada Lovelace", "example.com", "mc-ietf-1"), find("Ada Lovelace", "example.com", "mc-ietf-2")]);
    const refused = pair.find((r) => r.status === 429)!;
    expect(refused.body).toMatchObject({ error: { code: "too_many_concurrent_requests" } });
    expect(refused.headers.get("RateLimit-Policy")).toBe('"default";q=100;w=1');
    await updateSimConfig(env, { latencyMs: 0, maxConcurrent: null, ratePerSecond: null });
  });

  it("delays each answer by latencyMs", async () => {
    await updateSimConfig(env, { latencyMs: 150 });
    const started = Date.now();
    const reply = await find("Ada Lovelace", "example.com", "lat-1");
    expect(reply.status).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
  });
});

describe("durability", () => {
  it("keeps counters, billed keys, flaky keys and config across eviction", async () => {
    await updateSimConfig(env, { batchMaxSize: 7 });
    await find("Ada Lovelace", "example.com", "ev-1");
    expect((await find("!flaky Bob", "example.com", "ev-flaky")).status).toBe(503);
    const before = await simStats(env);
    expect(before).toMatchObject({ calls: 2, billed: 1 });

    await evictDurableObject(simStub(env));
    expect(await simStats(env)).toEqual(before);
    expect((await simConfig(env)).batchMaxSize).toBe(7);

    expect((await find("Ada Lovelace", "example.com", "ev-1")).status).toBe(200);
    expect((await find("!flaky Bob", "example.com", "ev-flaky")).status).toBe(200);
    expect(await simStats(env)).toMatchObject({ calls: 4, billed: 2, duplicates: 1 });
  });

  it("reset zeroes every counter and forgets billed and flaky keys, keeping config", async () => {
    await updateSimConfig(env, { batchMaxSize: 9 });
    await find("Ada Lovelace", "example.com", "rs-1");
    await find("Ada Lovelace", "example.com", "rs-1");
    await find("!flaky Cy", "example.com", "rs-flaky");
    await find("!flaky Cy", "example.com", "rs-flaky");
    await callSimBatch(env, { tool: "sim_verify_email", members: [{ idempotencyKey: "rs-b", input: { email: "a@b.c" } }] });
    await withOutbound({ caller: "Test:reset", gate: null }, () => find("Ada Lovelace", "example.com", "rs-2"));
    expect(await simStats(env)).toMatchObject({ maxInFlight: 1, maxInFlightByCaller: { "Test:reset": 1 } });

    const zeroed = await resetSim(env);
    expect(zeroed).toEqual({
      calls: 0,
      billed: 0,
      duplicates: 0,
      batchCalls: 0,
      rateLimited: 0,
      maxObservedPerSecond: 0,
      maxInFlight: 0,
      maxInFlightByCaller: {},
      keyReused: 0,
      byTool: { sim_find_email: { calls: 0, billed: 0 }, sim_verify_email: { calls: 0, billed: 0 } },
    });
    expect(await simStats(env)).toEqual(zeroed);
    expect((await simConfig(env)).batchMaxSize).toBe(9);

    expect((await find("Ada Lovelace", "example.com", "rs-1")).status).toBe(200);
    expect((await find("!flaky Cy", "example.com", "rs-flaky")).status).toBe(503);
    expect(await simStats(env)).toMatchObject({ calls: 2, billed: 1, duplicates: 0 });
  });
});

describe("requests in flight", () => {
  it("records the peak being answered at once, overall and per X-Sim-Caller, keeping it across eviction", async () => {
    await updateSimConfig(env, { latencyMs: 300 });
    const send = async (caller: string | null, i: number) => {
      const response = await simStub(env).fetch("https://sim/call", {
        method: "POST",
        headers: { "Idempotency-Key": `if-${caller}-${i}`, ...(caller === null ? {} : { [SIM_CALLER_HEADER]: caller }) },
        body: JSON.stringify({ tool: "sim_find_email", input: { name: `Ada ${i}`, domain: "example.com" } }),
      });
      await response.json();
      return response;
    };
    const answers = await Promise.all([
      ...[0, 1, 2].map((i) => send("RunCoordinator:peaks-a", i)),
      send("RunCoordinator:peaks-b", 0),
      ...[0, 1].map((i) => send(null, i)),
    ]);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
    const peaks = { maxInFlight: 6, maxInFlightByCaller: { "RunCoordinator:peaks-a": 3, "RunCoordinator:peaks-b": 1 } };
    expect((await simStats(env)).maxInFlightByCaller).toEqual(peaks.maxInFlightByCaller);
    expect(await simStats(env)).toMatchObject(peaks);
    // Requests one after the other never raise a peak.
    await send("RunCoordinator:peaks-b", 1);
    await send("RunCoordinator:peaks-b", 2);
    await evictDurableObject(simStub(env));
    expect(await simStats(env)).toMatchObject({ calls: 8, ...peaks });
  });
});

describe("/v1/sim routes", () => {
  const app = new Hono<{ Bindings: Env }>().route("/v1/sim", simRoutes).onError((error, c) => {
    if (error instanceof TroupeError) return c.json({ error: { code: error.code, message: error.message, details: error.details } }, 400);
    throw error;
  });

  it("forwards stats, config and reset, and rejects invalid config bodies", async () => {
    await find("Ada Lovelace", "example.com", "rt-1");
    const stats = await app.request("/v1/sim/stats", {}, env);
    expect(await stats.json()).toMatchObject({ calls: 1, billed: 1 });

    const put = await app.request("/v1/sim/config", { method: "PUT", body: JSON.stringify({ latencyMs: 3 }) }, env);
    expect(await put.json()).toEqual({
      latencyMs: 3,
      ratePerSecond: null,
      batchMaxSize: 50,
      rateLimitHeaders: "retry-after",
      maxConcurrent: null,
    });
    expect(await (await app.request("/v1/sim/config", {}, env)).json()).toMatchObject({ latencyMs: 3 });

    const invalid = await app.request("/v1/sim/config", { method: "PUT", body: JSON.stringify({ batchMaxSize: 0 }) }, env);
    expect(invalid.status).toBe(400);
    expect(await invalid.json()).toMatchObject({ error: { code: "invalid_request", details: [{ path: "batchMaxSize" }] } });
    const notJson = await app.request("/v1/sim/config", { method: "PUT", body: "nope" }, env);
    expect(notJson.status).toBe(400);
    expect((await simConfig(env)).latencyMs).toBe(3);

    const reset = await app.request("/v1/sim/reset", { method: "POST" }, env);
    expect(await reset.json()).toMatchObject({ calls: 0, billed: 0 });
  });
});

describe("POST /reset", () => {
  it("drops the requests in flight across it: answered 503 sim_reset, billed and counted in neither the old stats nor the new", async () => {
    await updateSimConfig(env, { latencyMs: 1_000 });
    const call = find("Edsger Dijkstra", "example.com", "across-reset");
    const batch = callSimBatch(env, {
      tool: "sim_verify_email",
      members: [{ idempotencyKey: "across-reset-v", input: { email: "e@d.nl" } }],
    });
    // Both admitted (counted) before the reset: each then sleeps its second.
    while ((await simStats(env)).calls < 2) await new Promise((r) => setTimeout(r, 5));
    await resetSim(env);
    for (const reply of [await call, await batch]) expect(reply).toMatchObject({ status: 503, body: { error: { code: "sim_reset" } } });
    expect(await simStats(env)).toMatchObject({ calls: 0, billed: 0, duplicates: 0 });
    // The key is not the reset simulator's: sent again, it bills once.
    await updateSimConfig(env, { latencyMs: 0 });
    expect((await find("Edsger Dijkstra", "example.com", "across-reset")).status).toBe(200);
    expect(await simStats(env)).toMatchObject({ calls: 1, billed: 1, duplicates: 0 });
  });
});

describe("GET /result (recovering a lost answer)", () => {
  it("returns what a key was billed for, says when its request is still in flight, and counts nothing", async () => {
    expect(await simResult(env, "never-sent")).toEqual({ found: false, inFlight: false });
    await updateSimConfig(env, { latencyMs: 300 });
    const call = find("Ada Lovelace", "example.com", "slow-1");
    // Poll until the request is being answered (no wall-clock assumption about when it arrives).
    let answer = await simResult(env, "slow-1");
    while (!answer.found && !answer.inFlight) answer = await simResult(env, "slow-1");
    expect(answer).toEqual({ found: false, inFlight: true });
    const reply = await call;
    expect(await simResult(env, "slow-1")).toEqual({ found: true, output: reply.body.output });
    expect(await simStats(env)).toMatchObject({ calls: 1, billed: 1, duplicates: 0 });
    // A key sent again while its first request is answered stays in flight until both are: the first answered must
    // not make a lookup say nobody is answering it (a takeover would send it a third time).
    // (A `!flaky` name: the first request is answered 503, unbilled, the second bills.)
    // Each request takes the latency configured when the simulator admits it (it counts it then): the first 1 s,
    // the second 4 s, so the first is answered while the second is still being answered.
    const admitted = async (calls: number) => {
      while ((await simStats(env)).calls < calls) await new Promise((r) => setTimeout(r, 5));
    };
    const before = (await simStats(env)).calls;
    await updateSimConfig(env, { latencyMs: 1_000 });
    const first = find("!flaky Grace Hopper", "example.com", "twice-1");
    await admitted(before + 1);
    await updateSimConfig(env, { latencyMs: 4_000 });
    const second = find("!flaky Grace Hopper", "example.com", "twice-1");
    await admitted(before + 2);
    expect((await first).status).toBe(503);
    expect(await simResult(env, "twice-1")).toEqual({ found: false, inFlight: true });
    expect((await second).status).toBe(200);
    expect(await simResult(env, "twice-1")).toMatchObject({ found: true });
    await updateSimConfig(env, { latencyMs: 0 });
    const batch = await callSimBatch(env, { tool: "sim_verify_email", members: [{ idempotencyKey: "v-1", input: { email: "a@b.co" } }] });
    expect(await simResult(env, "v-1")).toEqual({ found: true, output: batch.body.results[0].output });
    expect((await simStub(env).fetch("https://sim/result")).status).toBe(400);
  });
});

describe("a request whose body cannot be read", () => {
  it("is counted as a request and answered 400, not logged as the simulator failing", async () => {
    const failures: unknown[][] = [];
    const error = console.error;
    console.error = (...args: unknown[]) => {
      failures.push(args);
    };
    try {
      // The sender went away mid-body (workerd: "Can't read from request stream because client disconnected"): its
      // stream fails after the first bytes. Handed to the simulator object as its runtime would.
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('{"tool":"sim_find_email",'));
          controller.error(new TypeError("Can't read from request stream because client disconnected."));
        },
      });
      const request = new Request("https://sim/call", { method: "POST", body, headers: { "Idempotency-Key": "gone-1" } });
      const reply = await runInDurableObject(simStub(env), (sim: DurableObject) => sim.fetch!(request));
      expect(reply.status).toBe(400);
      expect(await reply.json()).toMatchObject({ error: { code: "body_unreadable" } });
      const stats = await simStats(env);
      expect({ calls: stats.calls, billed: stats.billed }).toEqual({ calls: 1, billed: 0 });
      expect(failures.filter((args) => String(args[0]).includes("sim provider failed"))).toEqual([]);
    } finally {
      console.error = error;
    }
  });
});
