/**
 * The org's daily limit is shared by its runs: each holds, at its org, what
 * it may spend of the day before spending it (OrgSpendStore.holdDaily), so
 * runs at once never pass the limit together. (Storage is this file's own:
 * the org `other` has spent nothing today here.)
 */
import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import { DAILY_HOLD_TTL_MS, OrgSpendStore, utcDay } from "../src/stores/org-spend-store";
import { createSql } from "../src/stores/sql";
import { toMicros } from "../src/stores/spend-store";
import { billedCredits, setSim, SIM_DEFAULTS } from "./chaos-helpers";
import { apiJson, simReset, simStats, startRun, waitForRun } from "./helpers";

const token = "other-token";

afterEach(async () => {
  await setSim(SIM_DEFAULTS);
  await apiJson("/v1/spend/limits", { method: "PUT", json: { dailyCredits: null }, token });
  await apiJson("/v1/spend/limits", { method: "PUT", json: { dailyCredits: null } });
});

const leads = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, i) => ({ id: `${prefix}-${i}`, name: `${prefix} Person ${i}`, domain: "daily.test" }));

describe("a keyed submit the daily limit refuses", () => {
  // Org dev: the tests below count org other's day from nothing.
  it("leaves its Idempotency-Key free: another request with it starts once the limit allows", async () => {
    const submit = (id: string) =>
      apiJson("/v1/runs", {
        method: "POST",
        json: { play: "demo-enrich", input: { rows: leads(id, 1) } },
        headers: { "Idempotency-Key": "refused-first" },
      });
    expect((await apiJson("/v1/spend/limits", { method: "PUT", json: { dailyCredits: 0 } })).status).toBe(200);
    const refused = await submit("First");
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("daily_spend_limit_reached");
    await apiJson("/v1/spend/limits", { method: "PUT", json: { dailyCredits: null } });
    // The key named the refused request's run, which never existed: 409 idempotency_key_reused for a week.
    const started = await submit("Second");
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    expect((await waitForRun(started.body.runId)).status).toBe("completed");
  });
});

describe("the org's daily limit, with runs at once", () => {
  it("is not passed by the runs together: each spends only what it holds of the day, and they fail spend_cap_reached", async () => {
    await simReset();
    await setSim({ latencyMs: 50 });
    expect((await apiJson("/v1/spend/limits", { method: "PUT", json: { dailyCredits: 20 }, token })).status).toBe(200);
    // Three runs of 50 credits each (1.25 a lead) start together; the day allows 20.
    const runIds = await Promise.all(
      ["A", "B", "C"].map((name) => startRun("demo-enrich", { rows: leads(`Together${name}`, 40) }, { token })),
    );
    const runs = await Promise.all(runIds.map((runId) => waitForRun(runId, { token })));
    for (const run of runs) {
      expect(run.status).toBe("failed");
      expect(run.error.code).toBe("spend_cap_reached");
    }
    const spent = runs.reduce((sum, run) => sum + run.usage.spend.total, 0);
    expect(spent).toBeLessThanOrEqual(20);
    // What the provider billed is what the runs counted, and the org's day holds it all.
    expect(billedCredits(await simStats())).toBe(spent);
    const day = (await apiJson("/v1/spend", { token })).body;
    expect(day.total).toBe(spent);
    // The day was spent, not left idle by holds that outlived their runs.
    expect(spent).toBeGreaterThan(10);
  });
});

describe("the org's daily limit, over child plays", () => {
  it("stops a parent without a cap of its own when its child is stopped there: the parent fails spend_cap_reached", async () => {
    await simReset();
    const { spentToday } = (await apiJson("/v1/spend/limits", { token })).body;
    expect((await apiJson("/v1/spend/limits", { method: "PUT", json: { dailyCredits: spentToday + 4 }, token })).status).toBe(200);
    const accounts = Array.from({ length: 6 }, (_, a) => ({
      id: `d${a}`,
      domain: "daily-children.test",
      people: [0, 1, 2, 3].map((p) => `Daily ${a} ${p}`),
    }));
    const parent = await waitForRun(await startRun("demo-accounts", { accounts }, { token }), { token, timeoutMs: 60_000 });
    // The row whose child the day stopped failed child_failed, and the others went on into the same wall.
    expect(parent.status).toBe("failed");
    expect(parent.error.code).toBe("spend_cap_reached");
    expect(parent.error.message).toContain("daily spend limit");
    expect(billedCredits(await simStats())).toBeLessThanOrEqual(4);
  });
});

describe("OrgSpendStore.holdDaily", () => {
  it("grants what the limit leaves after the day's bills and every live hold, at most half of it past the need, and forgets lapsed holds and past days", async () => {
    const seen = await runInDurableObject(env.ORG_DIRECTORY.getByName("holds-org"), (_o: unknown, state: DurableObjectState) => {
      const store = new OrgSpendStore({ sql: createSql(state.storage) });
      const now = Date.UTC(2026, 11, 5, 12);
      const unlimited = store.holdDaily("r1", now, toMicros(1_000));
      store.setLimits({ dailyCredits: 10 });
      store.record({ runId: "r0", upTo: 1, days: [{ day: utcDay(now), provider: "sim", micros: toMicros(3) }] });
      const a = store.holdDaily("r1", now, toMicros(4));
      const b = store.holdDaily("r2", now, toMicros(4));
      // 3 billed, 7 held: nothing is left for anyone.
      const c = store.holdDaily("r3", now, toMicros(1));
      // r1's spend is reported with 1 credit still reserved: its hold is that.
      store.resetDaily("r1", now, toMicros(1));
      // 3 left: a run that needs 1 and would like 10 gets half of it.
      const d = store.holdDaily("r3", now, toMicros(10), toMicros(1));
      const heldToday = store.heldOn(utcDay(now), now);
      // A hold not asked for again lapses: r2 died holding 3.
      const later = now + DAILY_HOLD_TTL_MS;
      const lapsed = store.heldOn(utcDay(now), later);
      // The next day: yesterday's holds and bills are not today's.
      const tomorrow = store.holdDaily("r2", now + 24 * 3600_000, toMicros(10));
      return {
        unlimited,
        a,
        b,
        c,
        d,
        heldToday,
        lapsed,
        tomorrow,
        heldTomorrow: store.heldOn(utcDay(now + 24 * 3600_000), now + 24 * 3600_000),
      };
    });
    expect(seen).toEqual({
      unlimited: toMicros(1_000),
      a: toMicros(4),
      b: toMicros(3),
      c: 0,
      d: toMicros(1.5),
      heldToday: 1 + 3 + 1.5,
      lapsed: 0,
      tomorrow: toMicros(10),
      heldTomorrow: 10,
    });
  });
});
