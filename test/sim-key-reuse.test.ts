import { env } from "cloudflare:workers";
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { Hono } from "hono";
import { beforeEach, describe, expect, it } from "vitest";
import { callSim, callSimBatch, resetSim, simResult, simStats, simStub, updateSimConfig } from "../src/sim/client";
import { simRoutes } from "../src/http/sim";

// One global simulator per test file: every test resets it and restores the default config.
beforeEach(async () => {
  await resetSim(env);
  const reply = await updateSimConfig(env, { latencyMs: 0, ratePerSecond: null, batchMaxSize: 50, maxConcurrent: null });
  expect(reply.status).toBe(200);
});

const find = (input: Record<string, string>, idempotencyKey: string) => callSim(env, { tool: "sim_find_email", input, idempotencyKey });
const verify = (email: string, idempotencyKey: string) => callSim(env, { tool: "sim_verify_email", input: { email }, idempotencyKey });
const reused = { status: 422, body: { error: { code: "idempotency_key_reused" } } };

describe("an idempotency key reused for a different request", () => {
  it("is refused 422 idempotency_key_reused, unbilled and counted, while the same request still replays", async () => {
    const first = await find({ name: "Ada Lovelace", domain: "example.com" }, "kr-1");
    expect(first).toMatchObject({ status: 200, body: { output: { email: "ada.lovelace@example.com" } } });

    // Another row's input under the same key: refused, and never handed the first row's answer.
    const other = await find({ name: "Alan Turing", domain: "bletchley.uk" }, "kr-1");
    expect(other).toMatchObject(reused);
    expect(other.body.error.message).toContain("kr-1");
    expect(other.body).not.toHaveProperty("output");
    // Another tool under the same key.
    const otherTool = await verify("ada.lovelace@example.com", "kr-1");
    expect(otherTool).toMatchObject(reused);
    expect(otherTool.body.error.message).toContain("sim_find_email");

    // The same request, its fields in another order, replays the first answer as a duplicate.
    const replay = await find({ domain: "example.com", name: "Ada Lovelace" }, "kr-1");
    expect(replay).toMatchObject({ status: 200, body: { output: first.body.output } });
    // The refusals left the key's answer as it was billed.
    expect(await simResult(env, "kr-1")).toEqual({ found: true, output: first.body.output });

    const stats = await simStats(env);
    expect(stats).toMatchObject({ calls: 4, billed: 1, duplicates: 1, keyReused: 2 });
    expect(stats.byTool).toEqual({ sim_find_email: { calls: 3, billed: 1 }, sim_verify_email: { calls: 1, billed: 0 } });
  });

  it("binds a key that failed or was flaky to its first input too, but not a key whose input was invalid", async () => {
    // A !flaky key answered 503 is bound: a different input under it is refused, the retry of the first is billed.
    expect((await find({ name: "!flaky Grace", domain: "example.com" }, "kr-flaky")).status).toBe(503);
    expect(await find({ name: "Grace Hopper", domain: "example.com" }, "kr-flaky")).toMatchObject(reused);
    expect(await find({ name: "!flaky Grace", domain: "example.com" }, "kr-flaky")).toMatchObject({
      status: 200,
      body: { output: { email: "!flaky.grace@example.com" } },
    });

    // A permanent failure binds its key as well: still the same failure for the same input, refused for another.
    for (let i = 0; i < 2; i++) {
      expect(await find({ name: "!fail Nobody", domain: "example.com" }, "kr-fail")).toMatchObject({
        status: 422,
        body: { error: { code: "person_not_found" } },
      });
    }
    expect(await find({ name: "Somebody", domain: "example.com" }, "kr-fail")).toMatchObject(reused);

    // An invalid input (400) binds nothing: the key is free for the valid request that follows.
    const invalid = await callSim(env, { tool: "sim_find_email", input: { name: 7 }, idempotencyKey: "kr-invalid" });
    expect(invalid.status).toBe(400);
    expect((await find({ name: "Ada Lovelace", domain: "example.com" }, "kr-invalid")).status).toBe(200);

    expect(await simStats(env)).toMatchObject({ billed: 2, duplicates: 0, keyReused: 2 });
  });

  it("refuses only the batch member whose key was first sent with another input; the batch and its other members are answered", async () => {
    await verify("pre@billed.io", "kb-pre");
    const reply = await callSimBatch(env, {
      tool: "sim_verify_email",
      members: [
        { idempotencyKey: "kb-1", input: { email: "one@x.io" } },
        { idempotencyKey: "kb-pre", input: { email: "someone.else@x.io" } },
        { idempotencyKey: "kb-2", input: { email: "two@x.io" } },
        // The same key twice in one batch: the first member binds it, the second (another input) is refused.
        { idempotencyKey: "kb-1", input: { email: "not-one@x.io" } },
        { idempotencyKey: "kb-1", input: { email: "one@x.io" } },
      ],
    });
    expect(reply.status).toBe(200);
    const results = reply.body.results as { status: number; output?: { email: string }; error?: { code: string } }[];
    expect(results.map((r) => r.status)).toEqual([200, 422, 200, 422, 200]);
    expect(results[1]!.error!.code).toBe("idempotency_key_reused");
    expect(results[3]!.error!.code).toBe("idempotency_key_reused");
    expect(results[1]).not.toHaveProperty("output");
    expect(results[4]!.output).toEqual(results[0]!.output);

    // A key first sent in a batch is bound for an unbatched call too.
    expect(await verify("other@x.io", "kb-2")).toMatchObject(reused);
    expect(await simStats(env)).toMatchObject({ calls: 3, batchCalls: 1, billed: 3, duplicates: 1, keyReused: 3 });
  });

  it("is counted in /v1/sim/stats, durably, and reset zeroes the count and frees the key", async () => {
    await find({ name: "Ada Lovelace", domain: "example.com" }, "kr-reset");
    expect(await find({ name: "Alan Turing", domain: "example.com" }, "kr-reset")).toMatchObject(reused);

    await evictDurableObject(simStub(env));
    expect(await find({ name: "Alan Turing", domain: "example.com" }, "kr-reset")).toMatchObject(reused);
    const app = new Hono<{ Bindings: Env }>().route("/v1/sim", simRoutes);
    expect(await (await app.request("/v1/sim/stats", {}, env)).json()).toMatchObject({ calls: 3, billed: 1, keyReused: 2 });

    const zeroed = await (await app.request("/v1/sim/reset", { method: "POST" }, env)).json();
    expect(zeroed).toMatchObject({ calls: 0, billed: 0, duplicates: 0, keyReused: 0 });
    expect(await simStats(env)).toMatchObject({ keyReused: 0 });
    // The reset simulator has forgotten the key: another input under it is a new request.
    expect(await find({ name: "Alan Turing", domain: "example.com" }, "kr-reset")).toMatchObject({
      status: 200,
      body: { output: { email: "alan.turing@example.com" } },
    });
    expect(await simStats(env)).toMatchObject({ calls: 1, billed: 1, keyReused: 0 });
  });

  it("replays a key billed before requests were recorded (no stored hash) as a duplicate, whatever it is sent with", async () => {
    const first = await find({ name: "Ada Lovelace", domain: "example.com" }, "kr-legacy");
    // Sim state from before keys were bound: a billed key with no recorded request.
    await runInDurableObject(simStub(env), (_instance, state) => {
      state.storage.sql.exec("DELETE FROM sim_key_requests WHERE idempotency_key = ?", "kr-legacy");
    });
    const replay = await find({ name: "Alan Turing", domain: "bletchley.uk" }, "kr-legacy");
    expect(replay).toMatchObject({ status: 200, body: { output: first.body.output } });
    expect(await verify("x@y.io", "kr-legacy")).toMatchObject({ status: 200, body: { output: first.body.output } });
    expect(await simStats(env)).toMatchObject({ billed: 1, duplicates: 2, keyReused: 0 });
  });
});
