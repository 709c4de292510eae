import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { RunStore } from "./run-store";
import { createSql } from "./sql";

describe("RunStore.progress", () => {
  it("counts each row of a chunk waiting again once: its rows stored before are completed or failed, not waiting too", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`progress-${crypto.randomUUID()}`);
    const progress = await runInDurableObject(stub, (_object, state) => {
      const store = new RunStore({ sql: createSql(state.storage), now: Date.now });
      store.create(
        {
          runId: "run-progress",
          org: "dev",
          play: "demo-enrich",
          parentRunId: null,
          force: false,
          forceToolRefresh: false,
          deadlineAt: Date.now() + 60_000,
        },
        {},
      );
      store.createMap({ name: "leads", shardCount: 1, total: 100, duplicatesDropped: 0, chunkRows: 50 });
      // Chunk 0: 44 rows completed, 1 failed, 5 leased by another run: it goes back to pending, to retry those 5.
      store.startChunk("leads", 0, 0);
      store.finishChunk("leads", 0, {
        done: false,
        completed: 44,
        failed: 1,
        reused: 0,
        blocked: Array.from({ length: 5 }, () => ({ ownerRunId: "run-other", leaseExpiresAt: Date.now() + 60_000 })),
        failureSamples: [],
      });
      return store.progress("leads");
    });
    expect(progress).toMatchObject({ total: 100, completed: 44, failed: 1, active: 0, waiting: 50, blocked: 5 });
    expect(progress.completed + progress.failed + progress.active + progress.waiting + progress.blocked).toBe(100);
  });
});

describe("RunStore input", () => {
  it("reads back an input whose character outside the BMP straddles a stored part's end", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`input-${crypto.randomUUID()}`);
    const label = "😀";
    const padding = (n: number) => ({
      rows: [
        { id: "pad", label: "x".repeat(n) },
        { id: "emoji", label },
      ],
    });
    // Its high half is the last unit of the first 512 Ki-unit part: two lone halves were stored as two U+FFFD.
    const input = padding(512 * 1024 - 1 - JSON.stringify(padding(0)).indexOf(label));
    expect(JSON.stringify(input).charCodeAt(512 * 1024 - 1)).toBe(label.charCodeAt(0));
    const read = await runInDurableObject(stub, (_object, state) => {
      const store = new RunStore({ sql: createSql(state.storage), now: Date.now });
      const init = { runId: "run-input", org: "dev", play: "test-padded", parentRunId: null, force: false, forceToolRefresh: false };
      store.create({ ...init, deadlineAt: Date.now() + 60_000 }, input);
      return store.input();
    });
    expect(read).toEqual(input);
  });
});
