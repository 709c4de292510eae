import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ChunkSummary } from "../../contracts/executors";
import { SubrequestMeter } from "../../core/meter";
import { policyFor } from "../../core/policy";
import { runStoreWithRun } from "../../stores/run-schema.fixture";
import { attemptDied } from "./chunk-outcomes";

describe("attemptDied", () => {
  it("names why the chunk's last attempt was lost when the map fails, whether or not it names the rows", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`outcomes-${crypto.randomUUID()}`);
    const messages = await runInDurableObject(stub, (_object, state) => {
      const store = runStoreWithRun(state, "run-outcomes");
      store.createMap({ name: "leads", shardCount: 1, total: 50, duplicatesDropped: 0, chunkRows: 50 });
      const policy = { ...policyFor(env), maxChunkRedispatches: 1 };
      const scope = { log: () => {}, policy, meter: new SubrequestMeter() };
      const lost = (rows: string[], reason: string): ChunkSummary => ({
        completed: 0,
        failed: 0,
        reused: 0,
        blocked: [],
        rejected: [],
        failureSamples: [],
        lost: { rows, receipts: [], reason },
      });
      return [
        attemptDied({ scope, store }, { map: "leads", idx: 0, attemptSeq: 0 }, lost([], "its executor stopped"))?.message,
        attemptDied({ scope, store }, { map: "leads", idx: 0, attemptSeq: 1 }, lost([], "its executor stopped"))?.message,
        attemptDied({ scope, store }, { map: "leads", idx: 0, attemptSeq: 2 }, lost(["lead-7"], "its leases lapsed"))?.message,
      ];
    });
    expect(messages[0]).toBeUndefined();
    expect(messages[1]).toContain("lost their leases 2 times (last: its rows (its executor stopped));");
    expect(messages[2]).toContain("lost their leases 3 times (last: 1 row (lead-7) (its leases lapsed));");
  });
});
