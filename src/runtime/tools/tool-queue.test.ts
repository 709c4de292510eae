import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { BulkQueue, WorkerBarrier } from "../../core/bulk-queue";
import { FatalLatch } from "../../core/latch";
import { SubrequestMeter } from "../../core/meter";
import { policyFor } from "../../core/policy";
import { RetryBudget } from "../../core/backoff";
import { NO_FAULTS } from "../../clients/faults";
import type { AnyTool } from "../../play/types";
import { EMPTY_SIGNAL, GateLedger, type Grant } from "../pacing/gate";
import { Pacer, type GateClient } from "../pacing/pacer";
import type { PacingPolicy } from "../pacing/policy";
import { DispatchWindow } from "./dispatch-window";
import type { DispatchServices } from "./services";
import { ToolQueue } from "./tool-queue";

const policy: PacingPolicy = { requestsPerSecond: 1000, concurrency: null, batchParallelism: 1 };

/** A gate in memory whose grants wait until `open()`: a call waits for its pacing slot until then. */
function heldGate() {
  const ledger = new GateLedger();
  ledger.report(policy, { signal: { ...EMPTY_SIGNAL, probe: true }, now: Date.now() });
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  const gate: GateClient = {
    acquire: async (r): Promise<Grant> => {
      await opened;
      return ledger.acquire(policy, { ...r, now: Date.now() });
    },
    report: async (r) => ledger.report(policy, { ...r, now: Date.now() }),
    release: async (r) => ledger.release(r.caller),
  };
  return { gate, open };
}

/** The parts of an invocation's services a tool queue uses. */
function services(pacer: Pacer): DispatchServices {
  const parts: Partial<DispatchServices> = {
    env,
    policy: policyFor(env),
    signal: new AbortController().signal,
    meter: new SubrequestMeter(),
    faults: NO_FAULTS,
    budget: new RetryBudget({ remaining: 10 }),
    log: () => {},
    now: Date.now,
    pacers: { for: () => pacer } as unknown as DispatchServices["pacers"],
  };
  return parts as DispatchServices;
}

const echo: AnyTool = {
  id: "echo",
  provider: "echo",
  version: "1",
  input: z.unknown(),
  execute: async (input: unknown) => input,
} as unknown as AnyTool;

describe("ToolQueue and the chunk's bulk receipt calls", () => {
  it("counts a row waiting for its pacing slot as the provider's, so the other rows' receipt operations wait to go out with its own", async () => {
    const { gate, open } = heldGate();
    const pacer = new Pacer({ gate, caller: "c", policy, now: Date.now, log: () => {} });
    const workers = new WorkerBarrier();
    const window = new DispatchWindow({ size: 10, latch: new FatalLatch() });
    const queue = new ToolQueue({ services: services(pacer), window, workers });
    const sent: string[][] = [];
    let settle!: () => void;
    const firstSent = new Promise<void>((resolve) => (settle = resolve));
    // A bulk queue that waits for company as long as the test runs: only the barrier sends it.
    const receipts = new BulkQueue<string, boolean>({
      maxWaitMs: 600_000,
      maxBatch: 100,
      workers,
      send: async (_group, items) => {
        sent.push(items);
        settle();
        return items.map(() => true);
      },
    });

    // Row a waits for its pacing slot; rows b and c have receipt operations to send.
    for (let i = 0; i < 3; i++) workers.enter();
    const a = (async () => {
      const held = await workers.park(queue.submit(echo, { input: "a", idempotencyKey: "ka", authScopeDigest: "d" }));
      held.done();
      await receipts.push("0", "a");
      workers.leave();
    })();
    const others = ["b", "c"].map(async (row) => {
      await receipts.push("0", row);
      workers.leave();
    });
    for (let i = 0; i < 20; i++) await Promise.resolve();
    expect(sent).toEqual([]);

    // The slot comes, the provider answers, row a adds its completion: the three go out in one call.
    open();
    await firstSent;
    await Promise.all([a, ...others]);
    expect(sent).toEqual([["b", "c", "a"]]);
    await pacer.close();
  });
});
