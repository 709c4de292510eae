import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { RunStore } from "../../stores/run-store";
import { createSql } from "../../stores/sql";
import { LiveRows } from "./live-rows";
import { MAX_CHUNKS_PER_EVENT, MapProgressFeed } from "./map-progress";

describe("MapProgressFeed", () => {
  it("sends a map's chunk completions together, at most once per progress interval, and the rest when told to", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`feed-${crypto.randomUUID()}`);
    const sent = await runInDurableObject(stub, (_object, state) => {
      let clock = 1_000;
      const events: { type: string; at: number; chunks?: number }[] = [];
      const store = new RunStore({ sql: createSql(state.storage), now: () => clock });
      store.create(
        {
          runId: "run-feed",
          org: "dev",
          play: "demo-enrich",
          parentRunId: null,
          force: false,
          forceToolRefresh: false,
          deadlineAt: 60_000,
        },
        {},
      );
      store.createMap({ name: "leads", shardCount: 1, total: 3_000, duplicatesDropped: 0, chunkRows: 1 });
      const feed = new MapProgressFeed({
        scope: {
          now: () => clock,
          policy: { progressIntervalMs: 100 } as never,
          emit: (type, data) => events.push({ type, at: clock, chunks: (data as { chunks?: unknown[] }).chunks?.length }),
        },
        store,
        live: new LiveRows(),
      });
      // 2,500 chunks end over 250 ms, ten a millisecond; the feed is told after each.
      for (let chunk = 0; chunk < 2_500; chunk++) {
        store.startChunk("leads", chunk, 0);
        store.finishChunk("leads", chunk, { done: true, completed: 1, failed: 0, reused: 0, blocked: [], failureSamples: [] });
        feed.computed("leads", 1);
        feed.tell("leads", false);
        if (chunk % 10 === 9) clock += 1;
      }
      feed.flushChunks("leads");
      return events;
    });
    const batches = sent.filter((e) => e.type === "chunks.completed");
    // Every chunk once, in events of at most MAX_CHUNKS_PER_EVENT.
    expect(batches.reduce((sum, e) => sum + e.chunks!, 0)).toBe(2_500);
    expect(Math.max(...batches.map((e) => e.chunks!))).toBeLessThanOrEqual(MAX_CHUNKS_PER_EVENT);
    // At the first tell, then every 100 ms of the clock (with its progress), then the rest at the end.
    const times = [...new Set(batches.map((e) => e.at))];
    expect(times).toEqual([1_000, 1_100, 1_200, 1_250]);
    expect(sent.filter((e) => e.type === "map.progress").map((e) => e.at)).toEqual([1_000, 1_100, 1_200]);
  });
});
