import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { runMigrations } from "./run-schema";
import { AFTER_MAP_TOTALS, UNDO_MAP_TOTALS } from "./run-schema.fixture";
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

  it("counts children's allotments against the cap, not as its bills, and shows sums without float noise", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`spend-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const spend = new SpendStore({ sql: createSql(state.storage), now: () => Date.UTC(2026, 11, 3) });
      // 1.001 + 0.001 added as credits is 1.0019999999999998.
      expect(spend.recordBilled(call("p", "find", 1.001))).toBe(true);
      expect(spend.recordBilled(call("q", "verify", 0.001))).toBe(true);
      expect(spend.totals()).toEqual({ total: 1.002, byProvider: { sim: 1.002 }, byTool: { find: 1.001, verify: 0.001 } });

      spend.allotChild("run_child", toMicros(3));
      spend.allotChild("run_child", toMicros(2));
      expect(spend.childAllotment("run_child")).toEqual({ micros: toMicros(5), ended: false });
      expect(spend.committedMicros()).toBe(toMicros(6.002));
      expect(spend.billedMicros()).toBe(toMicros(1.002));
      expect(spend.reservedMicros()).toBe(0);
      expect(spend.reserve(call("r"), toMicros(6.4))).toBe(false); // the child's allotment counts against the cap
      expect(spend.childEnded("run_child", toMicros(1.5))).toBe(true);
      // Told again: the larger count stands (bills that reached the child after its end), a smaller or equal one is old news.
      expect(spend.childEnded("run_child", toMicros(1))).toBe(false);
      expect(spend.childEnded("run_child", toMicros(1.5))).toBe(false);
      expect(spend.childAllotment("run_child")).toEqual({ micros: toMicros(1.5), ended: true });
      expect(spend.childEnded("run_child", toMicros(1.75))).toBe(true);
      expect(spend.childAllotment("run_child")).toEqual({ micros: toMicros(1.75), ended: true });
      expect(spend.spentWithChildrenMicros()).toBe(toMicros(2.752));
      expect(spend.reserve(call("r"), toMicros(3.3))).toBe(true);
      spend.releaseAll();
      expect(spend.committedMicros()).toBe(toMicros(2.752));
      expect(spend.totals().total).toBe(1.002);

      expect(spend.parentAllotment()).toBeNull();
      spend.setParentAllotment(0);
      spend.setParentAllotment(toMicros(2));
      spend.setParentAllotment(toMicros(1)); // only grows
      expect(spend.parentAllotment()).toBe(toMicros(2));
    });
  });

  it("lets a child's figure that counted its own children's allotments give way to one that does not, lower or not", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`spend-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const spend = new SpendStore({ sql: createSql(state.storage), now: () => Date.UTC(2026, 11, 3) });
      spend.allotChild("run_child", toMicros(10));
      expect(spend.countsAllotments()).toBe(true);
      // The child ended holding a grandchild's allotment: its figure counts it.
      expect(spend.childEnded("run_child", toMicros(6), true)).toBe(true);
      expect(spend.countsAllotments()).toBe(true);
      // Of two such figures the larger stands, as of two exact ones.
      expect(spend.childEnded("run_child", toMicros(5), true)).toBe(false);
      expect(spend.childEnded("run_child", toMicros(7), true)).toBe(true);
      // What the grandchild spent, once known, lowers it; a figure that still counted allotments comes too late.
      expect(spend.childEnded("run_child", toMicros(2.5))).toBe(true);
      expect(spend.childEnded("run_child", toMicros(7), true)).toBe(false);
      expect(spend.childEnded("run_child", toMicros(2))).toBe(false);
      expect(spend.childAllotment("run_child")).toEqual({ micros: toMicros(2.5), ended: true });
      expect(spend.countsAllotments()).toBe(false);
      expect(spend.committedMicros()).toBe(toMicros(2.5));
    });
  });

  it("reports each bill to the org once, however many bills the run holds", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`spend-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const spend = new SpendStore({ sql: createSql(state.storage), now: () => Date.UTC(2026, 11, 3, 12) });
      // Reserved before the others were billed, billed after the report: the next report carries it.
      spend.reserve(call("early"), null);
      for (const key of ["a", "b", "c"]) spend.recordBilled(call(key));
      const first = spend.unreported()!;
      expect(first).toMatchObject({ from: 0, days: [{ day: "2026-12-03", provider: "sim", micros: toMicros(1.5) }] });
      // Billed while the report is on its way: not marked with it.
      spend.recordBilled(call("during"));
      spend.markReported(first.upTo);
      const second = spend.unreported()!;
      expect(second).toMatchObject({ from: first.upTo, days: [{ day: "2026-12-03", provider: "sim", micros: toMicros(0.5) }] });
      spend.bill("early");
      spend.markReported(second.upTo);
      const third = spend.unreported()!;
      expect(third).toMatchObject({ from: second.upTo, days: [{ day: "2026-12-03", provider: "sim", micros: toMicros(0.5) }] });
      expect(spend.unreportedMicros()).toBe(toMicros(0.5));
      spend.markReported(third.upTo);
      expect(spend.unreported()).toBeNull();
      expect(spend.unreportedMicros()).toBe(0);
      // The org answered a place past the run's last bill (it counted more than this coordinator knows of): a new bill is still new.
      spend.markReported(third.upTo + 10);
      spend.recordBilled(call("after"));
      expect(spend.unreported()).toMatchObject({ from: third.upTo + 10, upTo: third.upTo + 11 });
    });
  });

  it("sums the spend a coordinator held before its sums were kept", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`spend-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      // The object's constructor migrated it; start over from the schema before the sums.
      state.storage.sql.exec(
        `${UNDO_MAP_TOTALS} DROP TABLE spend_totals; DROP INDEX spend_billed_seq; DROP TABLE spend_report; ALTER TABLE spend DROP COLUMN billed_seq;
        ALTER TABLE chunks DROP COLUMN resume; DROP TABLE reports_applied; DROP TABLE child_spend; DROP TABLE parent_allotment;
        DROP TABLE run_ending; ALTER TABLE watchers DROP COLUMN told_micros; DROP INDEX chunks_untold;
        ALTER TABLE chunks DROP COLUMN told; UPDATE _schema SET version = ?`,
        runMigrations.length - 9 - AFTER_MAP_TOTALS,
      );
      const sql = createSql(state.storage);
      sql.write`INSERT INTO spend (request_key, tool_id, provider, micros, state, at) VALUES
        ('a', 'find', 'sim', 500000, 'billed', 0), ('b', 'find', 'sim', 500000, 'reserved', 0), ('c', 'verify', 'sim', 250000, 'billed', 0)`;
      migrate(state.storage, runMigrations);
      const spend = new SpendStore({ sql, now: () => 0 });
      expect(kept(spend)).toEqual(summed(sql));
      expect(spend.committedMicros()).toBe(1_250_000);
      // Its bills were never reported: they are, in one report.
      expect(spend.unreported()).toMatchObject({ from: 0, days: [{ day: "1970-01-01", provider: "sim", micros: 750_000 }] });
    });
  });

  it("keeps what a coordinator had reported when its bills take places: the org's position was their rowid", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`spend-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      state.storage.sql.exec(
        `${UNDO_MAP_TOTALS} DROP INDEX spend_billed_seq; DROP TABLE spend_report; ALTER TABLE spend DROP COLUMN billed_seq;
        CREATE INDEX spend_unreported ON spend (at) WHERE state = 'billed' AND reported = 0; ALTER TABLE chunks DROP COLUMN resume;
        DROP TABLE reports_applied; DROP TABLE child_spend; DROP TABLE parent_allotment; DROP TABLE run_ending;
        ALTER TABLE watchers DROP COLUMN told_micros; DROP INDEX chunks_untold; ALTER TABLE chunks DROP COLUMN told;
        UPDATE _schema SET version = ?`,
        runMigrations.length - 8 - AFTER_MAP_TOTALS,
      );
      const sql = createSql(state.storage);
      sql.write`INSERT INTO spend (request_key, tool_id, provider, micros, state, at, reported) VALUES
        ('a', 'find', 'sim', 500000, 'billed', 0, 1), ('b', 'find', 'sim', 500000, 'billed', 0, 1), ('c', 'verify', 'sim', 250000, 'billed', 0, 0)`;
      migrate(state.storage, runMigrations);
      const spend = new SpendStore({ sql, now: () => 0 });
      expect(spend.reportedUpTo()).toBe(2);
      expect(spend.unreported()).toEqual({ from: 2, upTo: 3, days: [{ day: "1970-01-01", provider: "sim", micros: 250_000 }] });
    });
  });
});
