import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { OrgClient } from "../../clients/orgs";
import { createSql } from "../../stores/sql";
import { RunStore } from "../../stores/run-store";
import { toMicros } from "../../stores/spend-store";
import { reportSpend } from "./org-spend";

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
