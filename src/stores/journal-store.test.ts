import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { createSql } from "./sql";
import { JournalStore } from "./journal-store";

describe("JournalStore.open", () => {
  it("reads the clock once: a wait's timeout is exactly timeoutMs after it began, however the clock moves", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`journal-${crypto.randomUUID()}`);
    const entry = await runInDurableObject(stub, (_object, state) => {
      let clock = 1_000;
      const journal = new JournalStore({ sql: createSql(state.storage), now: () => clock++ });
      return journal.open({ key: "event:approve:0", kind: "event", eventKey: "approve", dueInMs: 300, timeoutMs: 300 });
    });
    expect(entry.timeoutAt! - entry.createdAt).toBe(300);
    expect(entry.dueAt).toBe(entry.timeoutAt);
  });
});
