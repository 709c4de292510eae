import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { OrgClient } from "../../clients/orgs";
import { createSql } from "../../stores/sql";
import { RunStore } from "../../stores/run-store";
import { toMicros } from "../../stores/spend-store";
import { InvocationSpendCap, reportSpend } from "./org-spend";

const bill = (key: string, credits: number) => ({ requestKey: key, toolId: "find", provider: "sim", credits });

describe("a run's spend in its org's day", () => {
  it("is counted once when a report's answer was lost and the run reports again with newer bills", async () => {
    const org = `org-${crypto.randomUUID()}`;
    const stub = env.RUN_COORDINATOR.getByName(`spend-report-${crypto.randomUUID()}`);
    await runInDurableObject(stub, async (_object, state) => {
      // Made in the object's own context: a stub made outside it cannot be used in it.
      const orgs = new OrgClient({ env, org });
      const store = new RunStore({ sql: createSql(state.storage), now: Date.now });
      store.create(
        {
          runId: "run-lost-answer",
          org,
          play: "demo-enrich",
          parentRunId: null,
          force: false,
          forceToolRefresh: false,
          deadlineAt: Date.now() + 60_000,
        },
        {},
      );
      store.spend.recordBilled(bill("a", 1));
      store.spend.recordBilled(bill("b", 2));
      // The org counts this report, but its answer never reaches the coordinator: nothing is marked reported.
      const lost = store.spend.unreported()!;
      await orgs.recordSpend({ runId: "run-lost-answer", ...lost });
      store.spend.recordBilled(bill("c", 4));

      expect(await reportSpend(env, store)).toBe(true);
      expect(store.spend.unreported()).toBeNull();
      expect((await orgs.spendBudget(Date.now())).spentToday).toBe(7);
      // Reporting again adds nothing.
      expect(await reportSpend(env, store)).toBe(true);
      expect((await orgs.spendBudget(Date.now())).spentToday).toBe(7);
    });
  });

  it("stays held, at the invocation's end, for bills that landed after its report", async () => {
    const org = `org-${crypto.randomUUID()}`;
    const runId = "run-late-bill";
    const stub = env.RUN_COORDINATOR.getByName(`spend-release-${crypto.randomUUID()}`);
    await runInDurableObject(stub, async (_object, state) => {
      const store = new RunStore({ sql: createSql(state.storage), now: Date.now });
      store.create(
        { runId, org, play: "demo-enrich", parentRunId: null, force: false, forceToolRefresh: false, deadlineAt: Date.now() + 60_000 },
        {},
      );
      store.spend.recordBilled(bill("a", 1));
      expect(await reportSpend(env, store)).toBe(true);
      // An executor's bill lands while the report was on its way: not in the org's total yet.
      store.spend.recordBilled(bill("b", 2));
      await new InvocationSpendCap({ store, maxSpend: null, dailyLimit: null }).release(env, runId, org);
    });
    const held = await runInDurableObject(env.ORG_DIRECTORY.getByName(org), (_object: unknown, state: DurableObjectState) =>
      state.storage.sql.exec<{ micros: number }>("SELECT micros FROM daily_holds WHERE run_id = ?", runId).toArray(),
    );
    expect(held).toEqual([{ micros: toMicros(2) }]);
  });

  it("counts a repeated or overlapping report once, and answers how far it has counted", async () => {
    const orgs = new OrgClient({ env, org: `org-${crypto.randomUUID()}` });
    const day = new Date().toISOString().slice(0, 10);
    const report = (from: number, upTo: number, credits: number) => ({
      runId: "run-overlap",
      from,
      upTo,
      days: [{ day, provider: "sim", micros: toMicros(credits) }],
    });
    expect(await orgs.recordSpend(report(0, 3, 3))).toBe(3);
    expect(await orgs.recordSpend(report(0, 3, 3))).toBe(3);
    // Starts inside what was counted: refused, the answer says where to start.
    expect(await orgs.recordSpend(report(0, 5, 5))).toBe(3);
    expect(await orgs.recordSpend(report(3, 5, 2))).toBe(5);
    expect((await orgs.spendBudget(Date.now())).spentToday).toBe(5);
  });
});

describe("grants under a run's maxSpend", () => {
  it("tell an attempt refused while another holds the rest to wait, but not one whose others are all waiting too", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`grants-wait-${crypto.randomUUID()}`);
    await runInDurableObject(stub, async (_object, state) => {
      let now = 1_000_000;
      const store = new RunStore({ sql: createSql(state.storage), now: () => now });
      const cap = new InvocationSpendCap({ store, maxSpend: 40, dailyLimit: null, now: () => now });
      const ask = (attemptId: string) => cap.grant(attemptId, toMicros(25));
      expect((await ask("a")).grantedMicros).toBe(toMicros(25));
      expect((await ask("b")).grantedMicros).toBe(toMicros(15));
      // a has used its 25 and asks for more: b still holds 15, which it will bill or give back.
      expect(await ask("a")).toMatchObject({ grantedMicros: 0, waitMs: expect.any(Number) });
      // b asks while a waits: a's hold comes back only once a is granted, so b would wait on a waiter: refused.
      expect((await ask("b")).waitMs).toBeUndefined();
      // a went on without asking again (a reservation of its own was freed): it no longer counts as waiting.
      now += 5_000;
      expect(await ask("b")).toMatchObject({ grantedMicros: 0, waitMs: expect.any(Number) });
      // a's 25 do not move (no bill, no settle, no release) for over 10 s: a is taken to be gone, b waits no more.
      now += 6_000;
      expect(await ask("b")).toMatchObject({ grantedMicros: 0, waitMs: expect.any(Number) });
      now += 5_000;
      expect((await ask("b")).waitMs).toBeUndefined();
      // Once both grants are billed (40 credits) and settled, nothing is left to wait for.
      store.spend.recordBilled(bill("spent", 40));
      store.spend.settleGrant("a", toMicros(25));
      store.spend.settleGrant("b", toMicros(15));
      expect(await ask("c")).toMatchObject({ grantedMicros: 0, spentCredits: 40 });
      expect((await ask("c")).waitMs).toBeUndefined();
    });
  });

  it("have the coordinator's own request wait while an attempt holds the rest, and refuse it once nothing is held", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`reserve-wait-${crypto.randomUUID()}`);
    await runInDurableObject(stub, async (_object, state) => {
      const store = new RunStore({ sql: createSql(state.storage), now: Date.now });
      const cap = new InvocationSpendCap({ store, maxSpend: 10, dailyLimit: null });
      expect((await cap.grant("a", toMicros(10))).grantedMicros).toBe(toMicros(10));
      // The attempt ends having billed 4: the 6 it held come back, and the coordinator's request takes 1 of them.
      const reserved = cap.reserve(bill("own", 1));
      setTimeout(() => {
        store.spend.recordBilled(bill("a-spent", 4));
        store.spend.releaseGrant("a");
      }, 300);
      await reserved;
      expect(store.spend.committedMicros()).toBe(toMicros(5));
      // Nothing held now but its own request: billed, the cap is reached for a request of 6.
      store.spend.bill("own");
      await expect(cap.reserve(bill("over", 6))).rejects.toMatchObject({ code: "spend_cap_reached" });
    });
  });
});
