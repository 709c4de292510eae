import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ReceiptClient, SheetClient } from "../../clients/shards";
import type { AttemptRef, PlannedRow } from "../../contracts/shards";
import { FatalLatch } from "../../core/latch";
import { SubrequestMeter } from "../../core/meter";
import { policyFor } from "../../core/policy";
import { InProcessChunkExecutor } from "./chunk-executor";

describe("InProcessChunkExecutor", () => {
  it("runs nothing when a newer epoch of its run has claimed the rows: a stale attempt started late ends lost", async () => {
    const meter = new SubrequestMeter();
    const dataset = `stale-${crypto.randomUUID()}`;
    const sheets = new SheetClient({ env, meter, location: { org: "dev", play: "test-calls", dataset, shardCount: 2 } });
    const runId = `run_${crypto.randomUUID().replaceAll("-", "")}`;
    const attemptOf = (seq: number): AttemptRef => ({ attemptId: `${runId}/${dataset}/0/${seq}`, runId, attemptSeq: seq });
    const rows: PlannedRow[] = Array.from({ length: 8 }, (_, index) => ({ key: `k${index}`, index, input: { name: `k${index}` } }));
    // Epoch 1 took the chunk over (the coordinator gave epoch 0 up) and failed every row.
    await sheets.claimRows({ attempt: attemptOf(1), rows, recompute: false, leaseTtlMs: 60_000 });
    await sheets.persistRows(
      attemptOf(1),
      rows.map((row) => ({ key: row.key, status: "failed" as const, data: row.input, error: "provider said no" })),
    );

    const computed: string[] = [];
    const policy = policyFor(env);
    const executor = new InProcessChunkExecutor({
      sheets,
      receipts: new ReceiptClient({ env, org: "dev", shardCount: policy.receiptShards, meter }),
      fields: { seen: (row) => void computed.push(String(row.name)) },
      policy,
      recompute: false,
      latch: new FatalLatch(),
      signal: new AbortController().signal,
      scheduler: () => {
        throw new Error("a stale attempt must not schedule tool calls");
      },
      log: () => {},
      redact: (text) => text,
      now: Date.now,
    });
    // An attempt of epoch 0 its executor held unstarted now starts.
    const summary = await executor.execute({ map: dataset, chunk: 0, attempt: attemptOf(0), rows });

    expect(summary.lost?.reason).toBe("attempt epoch 0 is over: epoch 1 of the run has claimed its rows");
    expect(summary).toMatchObject({ completed: 0, failed: 0, blocked: [], rejected: [] });
    expect(computed).toEqual([]);
    // The rows stay as epoch 1 wrote them.
    const view = await sheets.readRunRows(runId, 0, rows.length);
    expect(view.map((row) => [row.key, row.status, row.error])).toEqual(rows.map((row) => [row.key, "failed", "provider said no"]));
  });
});
