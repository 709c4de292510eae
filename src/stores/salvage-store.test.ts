import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { MAX_RESTORE_TRIES, SalvageStore } from "./salvage-store";
import { createSql } from "./sql";

const entry = (receiptKey: string) => ({
  receiptKey,
  toolId: "find",
  attempt: { attemptId: "a", runId: "run", attemptSeq: 0 },
  output: { email: `${receiptKey}@salvage.test` },
  completeAttempts: 3,
  error: "receipt shard overloaded",
  at: 0,
});

describe("SalvageStore", () => {
  it("gives an entry that came late tries of its own, though those before it gave up", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`salvage-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const salvage = new SalvageStore({ sql: createSql(state.storage) });
      expect(salvage.add(entry("early"))).toBe(true);
      expect(salvage.add(entry("early"))).toBe(false); // the first per receipt wins
      for (let i = 0; i < MAX_RESTORE_TRIES; i++) salvage.countRestoreTry();
      expect(salvage.restoreTries()).toBe(MAX_RESTORE_TRIES);
      // A report of an attempt given up on brings salvage after the run's restores gave up: it is tried again.
      expect(salvage.add(entry("late"))).toBe(true);
      expect(salvage.restoreTries()).toBe(0);
      expect(salvage.pendingCount()).toBe(2);
    });
  });
});
