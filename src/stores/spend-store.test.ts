import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { runMigrations } from "./run-schema";
import { SpendStore, toMicros } from "./spend-store";
import { createSql, migrate, type Sql } from "./sql";

/** The sums a spend table's rows add up to, computed from the rows themselves. */
function summed(sql: Sql) {
  return {
    committed: sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM spend`[0]!.n,
    billed: sql<{ n: number }>`SELECT coalesce(sum(micros), 0) AS n FROM spend WHERE state = 'billed'`[0]!.n,
    byTool: sql<{ tool: string; calls: number; micros: number }>`SELECT tool_id AS tool, count(*) AS calls, sum(micros) AS micros
      FROM spend WHERE state = 'billed' GROUP BY tool_id ORDER BY tool_id`,
  };
}

/** What the store answers from its kept sums. */
function kept(spend: SpendStore) {
  return {
    committed: spend.committedMicros(),
    billed: spend.billedMicros(),
    byTool: spend.billedByTool().sort((a, b) => a.tool.localeCompare(b.tool)),
  };
}

const call = (requestKey: string, toolId = "find", credits = 0.5) => ({ requestKey, toolId, provider: "sim", credits });

describe("SpendStore", () => {
  it("keeps its sums equal to its rows through every change a run makes", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`spend-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const sql = createSql(state.storage);
      const spend = new SpendStore({ sql, now: () => Date.UTC(2026, 11, 3) });
      const check = () => expect(kept(spend)).toEqual(summed(sql));

      expect(spend.reserve(call("a"), null)).toBe(true);
      expect(spend.reserve(call("a"), null)).toBe(true); // a retry keeps its one row
      expect(spend.reserve(call("b", "verify", 0.25), null)).toBe(true);
      expect(spend.reserve(call("c"), null)).toBe(true);
      check();
      spend.bill("a");
      spend.bill("a"); // idempotent
      spend.release("c");
      spend.release("c");
      check();
      // Billed without a recorded reservation, then again: one bill. A reserved one is billed at its reserved price.
      expect(spend.recordBilled(call("d", "verify", 0.25))).toBe(true);
      expect(spend.recordBilled(call("d", "verify", 0.25))).toBe(false);
      expect(spend.recordBilled(call("b", "verify", 9))).toBe(true);
      check();
      expect(spend.totals()).toEqual({ total: 1, byProvider: { sim: 1 }, byTool: { find: 0.5, verify: 0.5 } });

      // An executor's grant grows, shrinks as its bills arrive, and goes when its attempt ends.
      expect(spend.grant("attempt-1", toMicros(2), toMicros(2.5))).toBe(toMicros(1.5));
      expect(spend.grant("attempt-1", toMicros(1), null)).toBe(toMicros(1));
      spend.settleGrant("attempt-1", toMicros(0.5));
      check();
      expect(spend.committedMicros()).toBe(toMicros(1 + 2.5 - 0.5));
      spend.settleGrant("attempt-1", toMicros(10));
      spend.releaseGrant("attempt-1");
      expect(spend.reserve(call("e"), toMicros(1.25))).toBe(false); // past the cap: refused, nothing kept
      expect(spend.reserve(call("e"), toMicros(1.5))).toBe(true);
      check();
      spend.releaseAll();
      check();
      expect(spend.committedMicros()).toBe(toMicros(1));
    });
  });

  it("reports each bill to the org once, however many bills the run holds", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`spend-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const spend = new SpendStore({ sql: createSql(state.storage), now: () => Date.UTC(2026, 11, 3, 12) });
      for (const key of ["a", "b", "c"]) spend.recordBilled(call(key));
      // Reserved before the report and billed after it: the next report carries it.
      spend.reserve(call("late"), null);
      const first = spend.unreported()!;
      expect(first.days).toEqual([{ day: "2026-12-03", provider: "sim", micros: toMicros(1.5) }]);
      spend.markReported(first.upTo);
      expect(spend.unreported()).toBeNull();
      spend.bill("late");
      const second = spend.unreported()!;
      expect(second.days).toEqual([{ day: "2026-12-03", provider: "sim", micros: toMicros(0.5) }]);
      spend.markReported(second.upTo);
      expect(spend.unreported()).toBeNull();
    });
  });

  it("sums the spend a coordinator held before its sums were kept", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`spend-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      // The object's constructor migrated it; start over from the schema before the sums.
      state.storage.sql.exec(
        "DROP TABLE spend_totals; DROP INDEX spend_unreported; UPDATE _schema SET version = ?",
        runMigrations.length - 1,
      );
      const sql = createSql(state.storage);
      sql.write`INSERT INTO spend (request_key, tool_id, provider, micros, state, at) VALUES
        ('a', 'find', 'sim', 500000, 'billed', 0), ('b', 'find', 'sim', 500000, 'reserved', 0), ('c', 'verify', 'sim', 250000, 'billed', 0)`;
      migrate(state.storage, runMigrations);
      const spend = new SpendStore({ sql, now: () => 0 });
      expect(kept(spend)).toEqual(summed(sql));
      expect(spend.committedMicros()).toBe(1_250_000);
    });
  });
});
